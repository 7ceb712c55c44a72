"""Turn a ScoreRequest into token sequences, or a BadRequest that says what is wrong.

Text inputs are tokenized SEPARATELY (query, then each item) and the token ids joined. Tokenizing
the concatenated string would merge tokens across the seam (e.g. "...options:" + " Yes"), so the
query's tokens would differ per item and could not be computed once and shared. SGLang joins the
strings; for token-id inputs both agree. What the tokenizer adds of its own accord to
`tokenizer(query + item)` (special_tokens.py: a BOS, rarely an EOS) is added once around the joined
text ids, as SGLang has it; token ids are used as sent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from server.errors import BadRequest
from server.schemas import ScoreRequest
from server.sequence import ScoringOptions
from server.special_tokens import NO_SPECIAL_TOKENS, SpecialTokens

Tokenize = Callable[[str], list[int]]


@dataclass(frozen=True)
class InputLimits:
    vocab_size: int
    max_context_tokens: int       # the model's context window
    max_sequence_tokens: int      # the most one sequence may hold (max_total_tokens)
    max_items_per_request: int


@dataclass(frozen=True)
class PreparedRequest:
    prefix_ids: tuple[int, ...]
    own_ids: list[tuple[int, ...]]
    options: ScoringOptions


def prepare(request: ScoreRequest, tokenize: Tokenize, limits: InputLimits,
            special: SpecialTokens = NO_SPECIAL_TOKENS) -> PreparedRequest:
    """`special`: what the tokenizer puts around a text of its own (for text inputs only)."""
    items = [request.items] if isinstance(request.items, str) else request.items
    if len(items) > limits.max_items_per_request:
        raise BadRequest(f"{len(items)} items exceed max_items_per_request="
                         f"{limits.max_items_per_request}")
    options = ScoringOptions(tuple(request.label_token_ids), request.apply_softmax)
    check_label_ids(options.label_token_ids, limits.vocab_size)
    query_ids, item_ids = _token_ids(request.query, items, tokenize)
    for ids in (query_ids, *item_ids):
        check_token_ids(ids, limits.vocab_size)
    is_text = isinstance(request.query, str)
    prefix, own = layout(query_ids, item_ids, request.item_first,
                         special if is_text else NO_SPECIAL_TOKENS)
    for index, ids in enumerate(own):
        check_length(f"item {index}", len(prefix) + len(ids), limits)
    return PreparedRequest(prefix, own, options)


def layout(query_ids: list[int], item_ids: list[list[int]], item_first: bool,
           special: SpecialTokens) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """(shared prefix, each item's own ids): special.before + first part + second part +
    special.after per item, the query-first prefix shared."""
    before, after = special.before, special.after
    if item_first:
        # item + query: no prefix is shared between items.
        return (), [before + tuple(item) + tuple(query_ids) + after for item in item_ids]
    head, tails = before + tuple(query_ids), [tuple(item) + after for item in item_ids]
    if any(not tail for tail in tails):
        # An empty item is scored at the query's last token, so that token must be run per item.
        return head[:-1], [head[-1:] + tail for tail in tails]
    return head, tails


def _token_ids(query, items, tokenize: Tokenize) -> tuple[list[int], list[list[int]]]:
    query_is_text = isinstance(query, str)
    if items and any(isinstance(item, str) != query_is_text for item in items):
        raise BadRequest("query and items must be the same kind: all text, or all token-id lists")
    if not query_is_text:
        return list(query), [list(item) for item in items]
    for where, text in (("query", query), *((f"item {i}", item) for i, item in enumerate(items))):
        check_encodable(where, text)
    return tokenize(query), [tokenize(item) for item in items]


def check_encodable(where: str, text: str) -> None:
    """JSON can carry lone surrogates (e.g. "\\ud800") that no tokenizer can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise BadRequest(f"{where} is not valid Unicode text: {error.reason} at "
                         f"position {error.start}") from None


def check_label_ids(label_ids: tuple[int, ...], vocab_size: int) -> None:
    if not label_ids:
        raise BadRequest("label_token_ids must not be empty")
    if len(set(label_ids)) != len(label_ids):
        raise BadRequest(f"label_token_ids must not repeat an id: {list(label_ids)}")
    bad = [i for i in label_ids if not 0 <= i < vocab_size]
    if bad:
        raise BadRequest(f"label_token_ids {bad} are outside the vocabulary [0, {vocab_size})")


def check_token_ids(ids: list[int], vocab_size: int) -> None:
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise BadRequest(f"token ids {bad[:5]} are outside the vocabulary [0, {vocab_size})")


def check_length(where: str, num_tokens: int, limits: InputLimits, counted: str = "", hint: str = "") -> None:
    """One sequence's length against the limits (/v1/score's and rerank's one check): BadRequest
    naming it (`where`: "item 3", "documents[3]"), what its tokens are (`counted`) and what to do
    (`hint`), both appended as given."""
    if num_tokens == 0:
        raise BadRequest(f"{where}: query and item are both empty; nothing to score")
    if num_tokens > limits.max_context_tokens:
        raise BadRequest(f"{where}: {num_tokens} tokens{counted} exceed the model's context length "
                         f"of {limits.max_context_tokens}{hint}")
    if num_tokens > limits.max_sequence_tokens:
        raise BadRequest(f"{where}: {num_tokens} tokens{counted} exceed max_total_tokens="
                         f"{limits.max_sequence_tokens}, the most the server holds at once{hint}")
