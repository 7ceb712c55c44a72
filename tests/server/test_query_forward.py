"""query_forward: a batch's new queries as rows of one items forward. Which queries a round
computes (plan_round, waits_for_head: pure, over a real QueryCache); that the rows' recorded keys
and values equal each query's own forward (float32, within 1e-5) for whole queries and continued
heads, in one forward; and a runner's scores through it equal a fresh runner's per request."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from server.model_runner import ModelRunner
from server.query_cache import QueryCache
from server.query_forward import QueryRow, plan_round, waits_for_head
from server.sequence import Request, ScoringOptions
from tests.server.test_model_zoo import tiny_model

LABELS = ScoringOptions((5, 17, 42), False)
SYSTEM = tuple(range(3, 23))  # a 20-token head several queries share


@pytest.mark.parametrize("ids, head_len, others, waits", [
    (SYSTEM + (90, 91), 0, [SYSTEM + (80,)], True),     # 20 of 22 tokens would be spared
    ((1, 50, 51, 52, 53), 0, [(1, 60, 61)], False),     # only a BOS in common: not worth a round
    (SYSTEM + (90, 91), 20, [SYSTEM + (80,)], False),   # the cache already holds that head
    (SYSTEM + (90, 91), 0, [], False),
    ((5, 6, 7, 8), 0, [(5, 6, 9)], True),               # half of it spared: waits
], ids=["long-shared-head", "bos-only", "head-already-cached", "alone", "half"])
def test_a_query_waits_for_a_head_another_computes_only_when_it_spares_half(ids, head_len, others, waits):
    assert waits_for_head(ids, head_len, others) is waits


def request(query, adapter=None):
    return Request.create(query, [(50, 51)], LABELS, adapter)


def test_a_round_computes_each_distinct_query_once_and_defers_what_it_would_share():
    cache = QueryCache(1000)
    cached = request((7, 8, 9))
    cache.add(cached.rid, cached.prefix_ids, ((torch.zeros(1, 1, 3, 2),) * 2,))
    first, again, extends = request(SYSTEM + (90,)), request(SYSTEM + (90,)), request(SYSTEM + (91, 92))
    other, hit = request((1, 60, 61)), request((7, 8, 9))
    hits, now, later = plan_round([first, again, extends, other, hit], cache)
    assert list(hits) == [hit.rid]
    assert [req.rid for req, _ in now] == [first.rid, other.rid]
    assert [req.rid for req in later] == [again.rid, extends.rid]
    assert all(row.head is None and row.head_len == 0 for _, row in now)


def test_one_query_under_two_adapters_is_two_queries():
    cache = QueryCache(1000)
    base, adapted = request(SYSTEM), request(SYSTEM, adapter="sql")
    _, now, later = plan_round([base, adapted], cache)
    assert [row.adapter for _, row in now] == [None, "sql"] and not later


# qwen3 here has a 6-token sliding window: the queries are longer, so each takes its own forward.
@pytest.fixture(scope="module", params=["llama", "gemma", "glm4", "qwen3"])
def runner(request, tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    return ModelRunner(tiny_model(request.param, len(tokenizer)), tokenizer, query_cache_tokens=1000)


def test_queries_as_rows_of_one_forward_equal_their_own_forwards(runner, monkeypatch):
    whole = runner._compute_prefix(SYSTEM)
    # Five tokens to compute each (rows of one length: one forward, however the padding rule cuts).
    rows = [QueryRow(SYSTEM[:3] + (40, 41), 0, None, None),
            QueryRow(SYSTEM + (60, 61, 62, 63, 64), 20, whole, None),  # a cached head, continued
            QueryRow(tuple(range(100, 108)), 3, runner._compute_prefix((100, 101, 102)), None)]
    forwards = []
    forward = runner._items_forward.cascade
    monkeypatch.setattr(runner._items_forward, "cascade", lambda *args: forwards.append(args) or forward(*args))
    with torch.inference_mode():
        batched = runner._compute_queries(rows)
    assert len(forwards) == (0 if runner.model.config.model_type == "qwen3" else 1)
    for row, cache in zip(rows, batched, strict=True):
        alone = runner._compute_prefix(row.ids)
        for (keys, values), (keys_alone, values_alone) in zip(cache, alone, strict=True):
            assert keys.shape == keys_alone.shape and keys.is_contiguous()
            torch.testing.assert_close(keys, keys_alone, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(values, values_alone, atol=1e-5, rtol=1e-5)


def test_a_batch_of_new_queries_scores_as_each_request_alone(runner):
    queries = [SYSTEM + (90, 91), (1, 60, 61, 62), SYSTEM + (90, 91), (1, 70)]
    requests = [Request.create(query, [(50, 51), (52,), (53, 54, 55)], LABELS) for query in queries]
    result = runner.run([seq for req in requests for seq in req.sequences])
    runner.keep_only(())
    fresh = ModelRunner(runner.model, runner.tokenizer)
    for index, req in enumerate(requests):
        expected = fresh.run(Request.create(req.prefix_ids, [seq.own_ids for seq in req.sequences], LABELS).sequences)
        got = result.scores[3 * index:3 * index + 3]
        for row, expected_row in zip(got, expected.scores, strict=True):
            assert row == pytest.approx(expected_row, abs=1e-6)
