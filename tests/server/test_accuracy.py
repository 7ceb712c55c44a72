"""Accuracy on the real default model (SmolLM2-135M-Instruct GGUF, float32): every score served over
HTTP equals a plain transformers forward over the same token ids (query ids + item ids, each
tokenized separately without special tokens), read at the last position, within 1e-4.

The server path shares each query's key/values across items and right-pads several requests into
one batch; the reference runs each sequence alone, whole, with no cache, so any slip in the cache,
padding, positions or masking shows up as a difference. The model loads once per module (~16 s).
"""
from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace

import httpx
import pytest
import torch

from bench.server_process import free_port
from server.__main__ import build_engine, resolve_config
from server.config import ServerConfig
from tests.kit.servers import live_server

pytestmark = pytest.mark.slow

QUERY = "What is the capital of California? Answer Yes or No for each of the following options:"
ITEMS = ["Sacramento", "San Jose", "San Francisco"]
YES_NO = [9230, 2838]  # " Yes", " No" in SmolLM2's tokenizer
TOLERANCE = 1e-4           # absolute, the bar
RELATIVE_TOLERANCE = 1e-3


@pytest.fixture(scope="module")
def real():
    config = resolve_config(ServerConfig(dtype="float32", port=free_port(), request_timeout_s=120))
    engine = build_engine(config)
    tokenizer, model = engine.runner.tokenizer, engine.runner.model
    with live_server(config, engine) as url, httpx.Client(base_url=url, timeout=120) as client:
        yield SimpleNamespace(
            client=client, config=config,
            ids=lambda text: tokenizer(text, add_special_tokens=False)["input_ids"],
            decode=tokenizer.decode, model=model, engine=engine)


@torch.inference_mode()
def reference(model, token_ids: list[int], label_ids: list[int], apply_softmax: bool) -> list[float]:
    """The unshared computation: one whole sequence, no cache, logits at the last position."""
    logits = model(input_ids=torch.tensor([token_ids])).logits[0, -1].float()
    if apply_softmax:
        return torch.softmax(logits[label_ids], dim=-1).tolist()
    return torch.exp(torch.log_softmax(logits, dim=-1)[label_ids]).tolist()


def score(real, **body) -> dict:
    response = real.client.post("/v1/score", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def assert_matches(real, scores, sequences, label_ids, apply_softmax=False) -> None:
    assert len(scores) == len(sequences)
    for row, token_ids in zip(scores, sequences):
        expected = reference(real.model, token_ids, label_ids, apply_softmax)
        assert row == pytest.approx(expected, abs=TOLERANCE), (row, expected)
        # The seed's vocabulary probabilities are ~1e-4, where 1e-4 absolute says little; the
        # float32 paths agree to ~2e-5 relative (measured), so hold them to 1e-3 relative too.
        assert row == pytest.approx(expected, rel=RELATIVE_TOLERANCE), (row, expected)


def test_label_ids_are_yes_and_no(real):
    assert [real.decode([i]) for i in YES_NO] == [" Yes", " No"]


def test_seed_request_matches_the_reference_forward(real):
    body = score(real, query=QUERY, items=ITEMS, label_token_ids=YES_NO)
    query_ids, item_ids = real.ids(QUERY), [real.ids(item) for item in ITEMS]
    assert_matches(real, body["scores"], [query_ids + ids for ids in item_ids], YES_NO)
    num_tokens = sum(len(query_ids) + len(ids) for ids in item_ids)
    assert body["usage"] == {"prompt_tokens": num_tokens, "completion_tokens": 0,
                             "total_tokens": num_tokens}
    assert body["object"] == "scoring" and body["model"] == real.config.model_name
    print(f"\nseed scores (P(' Yes'), P(' No')): {body['scores']}")


@pytest.mark.parametrize("apply_softmax", [False, True], ids=["vocabulary", "softmax-over-labels"])
@pytest.mark.parametrize("item_first", [False, True], ids=["query-first", "item-first"])
@pytest.mark.parametrize("as_ids", [False, True], ids=["text", "token-ids"])
def test_every_option_matches_the_reference_forward(real, as_ids, item_first, apply_softmax):
    query_ids, item_ids = real.ids(QUERY), [real.ids(item) for item in ITEMS]
    query, items = (query_ids, item_ids) if as_ids else (QUERY, ITEMS)
    body = score(real, query=query, items=items, label_token_ids=YES_NO, item_first=item_first,
                 apply_softmax=apply_softmax)
    sequences = [ids + query_ids if item_first else query_ids + ids for ids in item_ids]
    assert_matches(real, body["scores"], sequences, YES_NO, apply_softmax)
    if apply_softmax:
        assert all(sum(row) == pytest.approx(1.0, abs=1e-6) for row in body["scores"])
    assert body["usage"]["prompt_tokens"] == sum(len(s) for s in sequences)


def test_concurrent_requests_batched_together_each_match_their_reference(real):
    # Different query lengths, item counts and labels, so batches mix prefixes of several sizes
    # (right-padded into one cache) and items of several lengths.
    bodies = [
        {"query": QUERY, "items": ITEMS, "label_token_ids": YES_NO},
        {"query": "Is this a fruit?", "items": ["apple", "a red sports car", "banana"],
         "label_token_ids": [9230, 2838, 28]},
        {"query": "The quick brown fox jumps over the lazy dog. Is the dog lazy? Answer:",
         "items": [" Yes", "", " No, it is not lazy at all"], "label_token_ids": YES_NO,
         "apply_softmax": True},
        {"query": " is a city in California.", "items": ["Sacramento", "Paris"],
         "label_token_ids": YES_NO, "item_first": True},  # no shared prefix in the batch
    ]
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        futures = [pool.submit(real.client.post, "/v1/score", json=body) for body in bodies]
        responses = [future.result() for future in futures]
    for body, response in zip(bodies, responses):
        assert response.status_code == 200, response.text
        query_ids, item_ids = real.ids(body["query"]), [real.ids(item) for item in body["items"]]
        sequences = [ids + query_ids if body.get("item_first") else query_ids + ids
                     for ids in item_ids]
        assert_matches(real, response.json()["scores"], sequences, body["label_token_ids"],
                       body.get("apply_softmax", False))


def test_cached_queries_score_as_a_fresh_runner(real):
    """The same query again (a hit in the query cache) and a longer one that begins with it (its
    cached head continued, only the rest computed) score as a runner that never saw a query:
    float32 within 1e-6; the cached-token counter grows by what was not computed."""
    from server.inputs import prepare
    from server.model_runner import ModelRunner
    from server.schemas import ScoreRequest
    from server.sequence import Request

    engine, longer = real.engine, QUERY + " Think of where the state's government sits."
    fresh = ModelRunner(real.model, engine.runner.tokenizer)

    def fresh_scores(query: str) -> tuple[list[list[float]], int]:
        prepared = prepare(ScoreRequest(query=query, items=ITEMS, label_token_ids=YES_NO),
                           fresh.tokenize, engine.input_limits, engine.special_tokens)
        request = Request.create(prepared.prefix_ids, prepared.own_ids, prepared.options)
        return fresh.run(request.sequences).scores, len(prepared.prefix_ids)

    score(real, query=QUERY, items=ITEMS[:1], label_token_ids=YES_NO)  # cached from here on
    query_len = fresh_scores(QUERY)[1]
    for query, num_computed in ((QUERY, 0), (longer, fresh_scores(longer)[1] - query_len)):
        cached_before = engine.metrics.num_cached_tokens
        got = score(real, query=query, items=ITEMS, label_token_ids=YES_NO)["scores"]
        expected, num_query_tokens = fresh_scores(query)
        for row, expected_row in zip(got, expected, strict=True):
            assert row == pytest.approx(expected_row, abs=1e-6)
        assert 0 < num_computed or query == QUERY
        assert (engine.metrics.num_cached_tokens - cached_before
                == num_query_tokens * len(ITEMS) - num_computed)
