"""A request's size in tokens, without a tokenizer: token ids are counted, text is measured in
characters and divided by a characters-per-token ratio learned from the workers' answers.

The gateway does not tokenize (it would need the model's tokenizer, and the workers may serve any
model): a worker's answer says how many prompt tokens it counted (`usage.prompt_tokens`: every
item with its query), and a text request's characters laid out the same way give the ratio
(TextRatio, a decayed ratio over answers). Pure, except TextRatio's own two numbers.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from gateway.finish import Size, decayed

# Until a text request is answered: English under common BPE vocabularies is ~4 characters a token.
DEFAULT_CHARS_PER_TOKEN = 4.0


@dataclass(frozen=True)
class Shape:
    """What the gateway counts in a request: units are token ids, or characters for text."""

    query_units: int = 0
    item_units: int = 0   # all items' (or documents') together
    num_items: int = 1
    is_text: bool = False
    shared_query: bool = True  # False: item_first (each item before the query: nothing shared)

    @property
    def prompt_units(self) -> int:
        """The units as the worker counts its prompt: every item with the query."""
        return self.num_items * self.query_units + self.item_units


NO_SHAPE = Shape()  # a request not sized: no tokens (the choice then goes by what is in flight)


def _units(value) -> int:
    if isinstance(value, str):
        return len(value)
    return len(value) if isinstance(value, list) else 0


def shape_of(payload) -> Shape:
    """The Shape of a score or rerank body; an empty one for a body that is not (the worker
    answers it 400 at once: its cost is nothing)."""
    if not isinstance(payload, dict):
        return Shape()
    query = payload.get("query")
    items = payload.get("items", payload.get("documents"))
    items = [items] if isinstance(items, str) else items if isinstance(items, list) else []
    return Shape(_units(query), sum(_units(item) for item in items), max(len(items), 1),
                 isinstance(query, str), payload.get("item_first") is not True)


class TextRatio:
    """Characters per token of the text requests answered so far (decayed sums: recent answers
    weigh more); DEFAULT_CHARS_PER_TOKEN before any."""

    def __init__(self) -> None:
        self._chars = 0.0
        self._tokens = 0.0

    @property
    def chars_per_token(self) -> float:
        return self._chars / self._tokens if self._chars > 0 and self._tokens > 0 else DEFAULT_CHARS_PER_TOKEN

    def learn(self, shape: Shape, prompt_tokens: int | None) -> None:
        """A text request of `shape` was answered with `prompt_tokens` counted by its worker."""
        if shape.is_text and prompt_tokens and prompt_tokens > 0 and shape.prompt_units > 0:
            self._chars = decayed(self._chars, shape.prompt_units)
            self._tokens = decayed(self._tokens, prompt_tokens)

    def size(self, shape: Shape) -> Size:
        """The tokens a worker computes for `shape`: the query once (item_first: once per item,
        nothing shared), then the items."""
        per_unit = 1.0 / self.chars_per_token if shape.is_text else 1.0
        query = shape.query_units * (1 if shape.shared_query else shape.num_items)
        return Size(query * per_unit, shape.item_units * per_unit)


def prompt_tokens(answer: bytes) -> int | None:
    """`usage.prompt_tokens` of a worker's answer (score or rerank), or None."""
    try:
        usage = json.loads(answer).get("usage")
    except (ValueError, AttributeError):
        return None
    tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) else None
