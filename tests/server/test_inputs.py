"""ScoreRequest -> token sequences, and every input the contract calls bad -> BadRequest."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from server.errors import BadRequest
from server.inputs import InputLimits, prepare
from server.schemas import ScoreRequest
from server.special_tokens import SpecialTokens

LIMITS = InputLimits(vocab_size=100, max_context_tokens=20, max_sequence_tokens=16,
                     max_items_per_request=4)


def tokenize(text: str) -> list[int]:
    """One token per character, so lengths are easy to read."""
    return [ord(ch) % 100 for ch in text]


def make(**fields) -> ScoreRequest:
    body = {"query": [1, 2, 3], "items": [[4], [5, 6]], "label_token_ids": [7, 8]} | fields
    # model_construct: prepare() must hold on its own, even for values the schema already refuses.
    return ScoreRequest.model_construct(**body)


def test_token_ids_query_is_the_shared_prefix():
    prepared = prepare(make(), tokenize, LIMITS)
    assert prepared.prefix_ids == (1, 2, 3)
    assert prepared.own_ids == [(4,), (5, 6)]
    assert prepared.options.label_token_ids == (7, 8)


def test_text_is_tokenized_separately_and_joined():
    prepared = prepare(make(query="ab", items=["c", "de"]), tokenize, LIMITS)
    assert prepared.prefix_ids == tuple(tokenize("ab"))
    assert prepared.own_ids == [tuple(tokenize("c")), tuple(tokenize("de"))]


BOS, EOS = SpecialTokens(before=(98,)), SpecialTokens(after=(99,))


def test_text_gets_the_tokenizers_bos_once_in_front_of_the_shared_query():
    prepared = prepare(make(query="ab", items=["c", "de"]), tokenize, LIMITS, BOS)
    assert prepared.prefix_ids == (98, *tokenize("ab"))
    assert prepared.own_ids == [tuple(tokenize("c")), tuple(tokenize("de"))]


def test_item_first_text_gets_the_bos_in_front_of_the_item():
    prepared = prepare(make(query="ab", items=["c"], item_first=True), tokenize, LIMITS, BOS)
    assert prepared.prefix_ids == ()
    assert prepared.own_ids == [(98, *tokenize("c"), *tokenize("ab"))]


def test_a_tokenizer_that_appends_an_eos_gets_it_after_each_whole_sequence():
    prepared = prepare(make(query="ab", items=["c", ""]), tokenize, LIMITS, EOS)
    assert prepared.prefix_ids == tuple(tokenize("ab"))  # no empty tail: nothing moves
    assert prepared.own_ids == [(*tokenize("c"), 99), (99,)]
    first = prepare(make(query="ab", items=["c"], item_first=True), tokenize, LIMITS, EOS)
    assert first.own_ids == [(*tokenize("c"), *tokenize("ab"), 99)]


def test_an_empty_text_item_after_a_bos_only_query_is_scored_at_the_bos():
    prepared = prepare(make(query="", items=["c", ""]), tokenize, LIMITS, BOS)
    assert prepared.prefix_ids == ()
    assert prepared.own_ids == [(98, *tokenize("c")), (98,)]


def test_token_ids_are_used_as_sent_without_special_tokens():
    prepared = prepare(make(), tokenize, LIMITS, SpecialTokens(before=(98,), after=(99,)))
    assert prepared.prefix_ids == (1, 2, 3)
    assert prepared.own_ids == [(4,), (5, 6)]


def test_the_schema_already_refuses_negative_ids():
    with pytest.raises(ValidationError):
        ScoreRequest.model_validate({"query": [-1], "items": [[1]], "label_token_ids": [1]})


def test_a_single_string_is_one_item():
    assert prepare(make(query="ab", items="c"), tokenize, LIMITS).own_ids == [tuple(tokenize("c"))]


def test_item_first_puts_the_item_before_the_query_and_shares_nothing():
    prepared = prepare(make(item_first=True), tokenize, LIMITS)
    assert prepared.prefix_ids == ()
    assert prepared.own_ids == [(4, 1, 2, 3), (5, 6, 1, 2, 3)]


def test_an_empty_item_is_scored_at_the_querys_last_token():
    prepared = prepare(make(items=[[4], []]), tokenize, LIMITS)
    assert prepared.prefix_ids == (1, 2)
    assert prepared.own_ids == [(3, 4), (3,)]


def test_no_items_means_no_sequences():
    assert prepare(make(items=[]), tokenize, LIMITS).own_ids == []


@pytest.mark.parametrize(
    "fields, message",
    [
        pytest.param({"query": "ab", "items": [[1]]}, "same kind", id="text-query-token-items"),
        pytest.param({"query": [1], "items": ["a"]}, "same kind", id="token-query-text-items"),
        pytest.param({"label_token_ids": [7, 7]}, "repeat", id="duplicate-label"),
        pytest.param({"label_token_ids": [-1]}, "outside the vocabulary", id="negative-label"),
        pytest.param({"label_token_ids": [100]}, "outside the vocabulary", id="label-past-vocab"),
        pytest.param({"items": [[100]]}, "outside the vocabulary", id="item-id-past-vocab"),
        pytest.param({"query": [-3]}, "outside the vocabulary", id="negative-query-id"),
        pytest.param({"items": [[1]] * 5}, "max_items_per_request=4", id="too-many-items"),
        pytest.param({"items": [list(range(14))]}, "max_total_tokens=16", id="longer-than-the-token-budget"),
        pytest.param({"query": [], "items": [[]]}, "both empty", id="empty-sequence"),
        pytest.param({"query": "a\ud800", "items": ["b"]}, "not valid Unicode", id="lone-surrogate"),
    ],
)
def test_bad_input_is_a_bad_request_that_says_why(fields, message):
    with pytest.raises(BadRequest, match=message):
        prepare(make(**fields), tokenize, LIMITS)


def test_longer_than_the_context_names_the_context():
    limits = InputLimits(vocab_size=100, max_context_tokens=5, max_sequence_tokens=50,
                         max_items_per_request=4)
    with pytest.raises(BadRequest, match="context length of 5"):
        prepare(make(items=[[1, 2, 3]]), tokenize, limits)
