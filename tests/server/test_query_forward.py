"""query_forward: a batch's new queries as rows of one items forward. Which queries a round
computes (plan_round, waits_for_head: pure, over a real QueryCache); that the rows' recorded keys
and values equal each query's own forward (float32, within 1e-5) for whole queries and continued
heads, in one forward; and a runner's scores through it equal a fresh runner's per request."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from server.batch_layout import Group
from server.forward_rows import forward_rows, prefix_segments
from server.model_runner import ModelRunner
from server.query_cache import QueryCache
from server.query_forward import QueryRow, plan_round, riding_queries, waits_for_head
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


def test_a_query_rides_in_its_items_first_forward_when_nothing_of_it_is_cached_and_it_widens_nothing():
    cache = QueryCache(1000)
    known = request((7, 8, 9))
    cache.add(known.rid, known.prefix_ids, ((torch.zeros(1, 1, 3, 2),) * 2,))
    long_items = Request.create((1, 2, 3), [(50, 51, 52, 53)], LABELS)
    short_items = Request.create((1, 2, 3, 4, 5, 6), [(50, 51)], LABELS)     # its query is the longer
    twice = [Request.create((30, 31), [(50, 51, 52)], LABELS) for _ in range(2)]  # one computes it for both
    cached, headed = request((7, 8, 9)), request((7, 8, 9, 10))  # 3 of its 4 tokens cached: not worth it
    bos_only = Request.create((7, 90, 91, 92), [(50, 51, 52, 53)], LABELS)  # 1 of 4 cached: rides
    requests = [long_items, short_items, *twice, cached, headed, bos_only]
    rids = [seq.request.rid for req in requests for seq in req.sequences]
    groups = [Group(tuple(range(len(rids))), 4, 10)]
    assert riding_queries(requests, groups, rids, cache) == {long_items.rid: 0, bos_only.rid: 0}
    # A request whose items span two groups: its query rides in the first.
    split = Request.create((1, 2), [(50, 51), (60, 61, 62)], LABELS)
    groups = [Group((1,), 3, 3), Group((0,), 2, 2)]
    assert riding_queries([split], groups, [split.rid] * 2, QueryCache(0)) == {split.rid: 0}


def test_the_forward_puts_a_riding_query_right_after_its_items_at_positions_from_zero():
    first = Request.create((1, 2), [(50, 51, 52), (60,)], LABELS)
    second = Request.create((3, 4, 5), [(70, 71)], LABELS)
    sequences = [*first.sequences, *second.sequences]
    rows = forward_rows(sequences, [first])
    assert rows.item_rows == [0, 1, 3] and rows.query_rows == {first.rid: (2, 2)}
    assert rows.input_ids.tolist() == [[50, 51, 52], [60, 0, 0], [1, 2, 0], [70, 71, 0]]
    assert rows.positions.tolist() == [[2, 3, 4], [2, 3, 4], [0, 1, 2], [3, 4, 5]]
    segments = prefix_segments(sequences, rows, {second.rid: (("k", "v"),)}, num_layers=1)
    assert segments.bounds == ((0, 2), (3, 4)) and segments.query_rows == ((2, 2), None)
    assert segments.layers == ((None, ("k", "v")),)


def test_a_query_computed_with_its_items_is_kept_and_counted(runner):
    req = Request.create((200, 80, 81, 82), [(50, 51, 52, 53, 54), (55, 56, 57, 58, 59)], LABELS)
    result = runner.run(req.sequences)
    assert runner.query_cache.has(req.prefix_ids)
    riding = runner.model.config.model_type != "qwen3"  # its window cuts: the query is computed apart
    assert result.num_padding_tokens == (1 if riding else 0)  # the query row's one
    assert result.num_computed_tokens - result.num_padding_tokens == 4 + 10
    runner.keep_only(())
    fresh = ModelRunner(runner.model, runner.tokenizer).run(req.sequences)
    for row, expected_row in zip(result.scores, fresh.scores, strict=True):
        assert row == pytest.approx(expected_row, abs=1e-6)
