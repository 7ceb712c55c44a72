"""What a tokenizer puts around a text of its own accord, read from the tokenizer itself.

SGLang scores text as `tokenizer(query + item)`, special tokens included: a BOS in front for Llama 3
and Gemma style tokenizers, nothing for GPT-2 and Qwen style ones (a few append an EOS as well). We
tokenize query and items without special tokens (inputs.py), so the same tokens must be put back
around the joined ids. No per-family table: one probe text encoded with and without special tokens
shows what the tokenizer's post-processor (or build_inputs_with_special_tokens) adds, wherever the
tokenizer came from (a folder, a GGUF file, a hub id).
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
