"""What a tokenizer adds around a text, read from real tokenizers: none (byte-level BPE, as
SmolLM2's and Qwen's), a BOS in front (Llama 3's post-processor), an EOS behind."""
from __future__ import annotations

import pytest
from tokenizers import Tokenizer, processors
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from server.special_tokens import PROBE_TEXT, SpecialTokens, special_tokens_of, split_around
from tests.kit.models import with_bos


@pytest.fixture(scope="module")
def plain(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_a_tokenizer_that_adds_nothing_has_no_special_tokens(plain):
    assert plain(PROBE_TEXT)["input_ids"] == plain(PROBE_TEXT, add_special_tokens=False)["input_ids"]
    assert special_tokens_of(plain) == SpecialTokens()


def test_a_bos_adding_tokenizer_has_its_bos_in_front(plain):
    bos = with_bos(plain)
    assert special_tokens_of(bos) == SpecialTokens(before=(bos.bos_token_id,))


def test_an_eos_appending_tokenizer_has_its_eos_behind(plain):
    backend = Tokenizer.from_str(plain.backend_tokenizer.to_str())
    eos_id = backend.token_to_id(plain.eos_token)
    backend.post_processor = processors.TemplateProcessing(
        single="$A <eos>", pair="$A <eos> $B <eos>", special_tokens=[("<eos>", eos_id)])
    eos = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=plain.eos_token)
    assert special_tokens_of(eos) == SpecialTokens(after=(eos_id,))


def test_split_around_finds_the_text_inside_the_special_tokens():
    assert split_around([1, 5, 6, 2], [5, 6]) == SpecialTokens((1,), (2,))
    assert split_around([5, 6], [5, 6]) == SpecialTokens()


def test_special_tokens_that_change_the_text_tokens_are_an_error():
    with pytest.raises(ValueError, match="cannot be told apart"):
        split_around([1, 7, 6], [5, 6])
