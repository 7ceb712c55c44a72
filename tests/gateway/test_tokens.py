"""gateway.tokens: a request's shape from its body, its size in tokens (ids counted, text by a
learned characters-per-token ratio) and the prompt tokens a worker's answer reports."""
import json

import pytest

from gateway.finish import Size
from gateway.tokens import DEFAULT_CHARS_PER_TOKEN, Shape, TextRatio, prompt_tokens, shape_of


@pytest.mark.parametrize("payload, shape", [
    ({"query": [1, 2, 3], "items": [[4, 5], [6]]}, Shape(3, 3, 2, False, True)),
    ({"query": "abcd", "items": ["ef", "ghij"]}, Shape(4, 6, 2, True, True)),
    ({"query": "abcd", "items": "ef"}, Shape(4, 2, 1, True, True)),               # one item
    ({"query": "q", "documents": ["doc one", "two"]}, Shape(1, 10, 2, True, True)),  # a rerank
    ({"query": [1, 2], "items": [[3]], "item_first": True}, Shape(2, 1, 1, False, False)),
    ({"items": ["a"]}, Shape(0, 1, 1, False, True)),   # no query: the worker answers 400
    ([1, 2], Shape()),
], ids=["ids", "text", "one-text-item", "rerank", "item-first", "no-query", "not-object"])
def test_shape_of(payload, shape):
    assert shape_of(payload) == shape


def test_token_ids_are_counted_exactly():
    assert TextRatio().size(Shape(2000, 800, 16)) == Size(2000, 800)


def test_item_first_computes_the_query_with_every_item():
    assert TextRatio().size(Shape(100, 30, 3, shared_query=False)) == Size(300, 30)


def test_text_is_divided_by_the_default_ratio_until_an_answer_teaches_one():
    ratio, text = TextRatio(), Shape(400, 200, 2, is_text=True)
    assert ratio.size(text) == Size(400 / DEFAULT_CHARS_PER_TOKEN, 200 / DEFAULT_CHARS_PER_TOKEN)
    # the worker counted 500 prompt tokens for 2 x 400 + 200 = 1,000 characters (each item with
    # the query): 2 characters per token
    ratio.learn(text, 500)
    assert ratio.chars_per_token == 2.0 and ratio.size(text) == Size(200, 100)


def test_token_id_requests_and_empty_answers_teach_nothing():
    ratio = TextRatio()
    ratio.learn(Shape(400, 200, 2), 1000)               # ids: nothing to learn
    ratio.learn(Shape(400, 200, 2, is_text=True), None)  # no usage in the answer
    ratio.learn(Shape(400, 200, 2, is_text=True), 0)
    assert ratio.chars_per_token == DEFAULT_CHARS_PER_TOKEN


@pytest.mark.parametrize("answer, tokens", [
    (json.dumps({"scores": [[0.1]], "usage": {"prompt_tokens": 42, "total_tokens": 42}}).encode(), 42),
    (b'{"scores": []}', None),
    (b'{"usage": {"prompt_tokens": "many"}}', None),
    (b"not json", None),
    (b"[1]", None),
], ids=["usage", "no-usage", "not-a-count", "not-json", "not-object"])
def test_prompt_tokens_of_an_answer(answer, tokens):
    assert prompt_tokens(answer) == tokens
