"""What a tokenizer puts around a text of its own accord, read from the tokenizer itself.

SGLang scores text as `tokenizer(query + item)`, special tokens included: a BOS in front for Llama 3
and Gemma style tokenizers, nothing for GPT-2 and Qwen style ones (a few append an EOS as well). We
tokenize query and items without special tokens (inputs.py), so the same tokens must be put back
around the joined ids. No per-family table: one probe text encoded with and without special tokens
shows what the tokenizer's post-processor (or build_inputs_with_special_tokens) adds, wherever the
tokenizer came from (a folder, a GGUF file, a hub id). A cross-encoder's pair (PairTokens) is read
the same way from one probe pair: what goes before, between and after the two texts.
"""
from __future__ import annotations

from dataclasses import dataclass

PROBE_TEXT = "Is this relevant? Yes"


@dataclass(frozen=True)
class SpecialTokens:
    before: tuple[int, ...] = ()  # in front of whichever part comes first (query, or item_first's item)
    after: tuple[int, ...] = ()   # after the last part


NO_SPECIAL_TOKENS = SpecialTokens()


def special_tokens_of(tokenizer) -> SpecialTokens:
    """The ids the tokenizer adds around a single text; ValueError if they cannot be told apart."""
    plain = list(tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"])
    full = list(tokenizer(PROBE_TEXT)["input_ids"])
    return split_around(full, plain)


def split_around(full: list[int], plain: list[int]) -> SpecialTokens:
    """`full` as special ids + `plain` + special ids; ValueError if `plain` is not inside it."""
    for start in range(len(full) - len(plain) + 1):
        if full[start:start + len(plain)] == plain:
            return SpecialTokens(tuple(full[:start]), tuple(full[start + len(plain):]))
    raise ValueError(f"the tokenizer's special tokens cannot be told apart from the text: "
                     f"{PROBE_TEXT!r} encodes as {plain} without them but as {full} with them")


PROBE_PAIR = ("Is this relevant?", "Yes it is")


@dataclass(frozen=True)
class PairTokens:
    """What a tokenizer puts around a pair, `tokenizer(first, second)`: before + first + middle +
    second + after (BERT: [CLS] a [SEP] b [SEP]; XLM-RoBERTa: <s> a </s></s> b </s>; Qwen: nothing;
    Llama 3: <bos> a <bos> b). `types`: the token type id of the first part (before, first, middle)
    and of the second (second, after), or None for a tokenizer that sends no token_type_ids."""

    before: tuple[int, ...] = ()
    middle: tuple[int, ...] = ()
    after: tuple[int, ...] = ()
    types: tuple[int, int] | None = None


def pair_tokens_of(tokenizer) -> PairTokens:
    """The ids the tokenizer adds around a pair, read from one probe pair; ValueError if they
    cannot be told apart or a part's token types are mixed."""
    first, second = (list(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in PROBE_PAIR)
    encoded = tokenizer(*PROBE_PAIR)
    before, middle, after = split_pair(list(encoded["input_ids"]), first, second)
    type_ids = encoded.get("token_type_ids")
    types = None
    if type_ids is not None:
        cut = len(before) + len(first) + len(middle)
        heads, tails = set(type_ids[:cut]), set(type_ids[cut:])
        if len(heads) != 1 or len(tails) != 1:
            raise ValueError(f"the tokenizer's token types of a pair are mixed within a part: {type_ids}")
        types = (heads.pop(), tails.pop())
    return PairTokens(before, middle, after, types)


def split_pair(full: list[int], first: list[int], second: list[int]) -> tuple[tuple[int, ...], ...]:
    """(before, middle, after) of `full` = before + first + middle + second + after; ValueError if
    the two parts are not inside it in that order."""
    around = split_around(full, first)
    rest = list(around.after)
    inner = split_around(rest, second)
    return around.before, inner.before, inner.after
