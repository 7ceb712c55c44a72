"""ModelRunner with its query cache, on a tiny random Llama: a query computed by one request is
reused by later ones and by others in the same batch; a cached head is continued, not recomputed;
scores equal a fresh runner's (float32 within 1e-6); the cached/computed counters are true."""
from __future__ import annotations

import pytest
import torch

from server.model_loader import load_model
from server.model_runner import ModelRunner
from server.sequence import Request, ScoringOptions

LABELS = ScoringOptions((5, 17, 42), False)
QUERY = tuple(range(3, 43))  # 40 tokens
ITEMS = [(50, 51), (60,), (70, 71, 72)]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model(str(tiny_model_dir), torch.device("cpu"), torch.float32)


@pytest.fixture
def runner(tiny):
    return ModelRunner(*tiny, query_cache_tokens=1000)


def fresh_scores(tiny, query, items) -> list[list[float]]:
    """What a runner that never saw a query scores (no cache at all)."""
    request = Request.create(query, items, LABELS)
    return ModelRunner(*tiny).run(request.sequences).scores


def assert_same(got, expected):
    for row, expected_row in zip(got, expected, strict=True):
        assert row == pytest.approx(expected_row, abs=1e-6)


def test_a_later_request_with_the_same_query_computes_only_its_items(runner, tiny):
    first = Request.create(QUERY, ITEMS, LABELS)
    runner.run(first.sequences)
    runner.keep_only(())  # the first request left; its query stays
    second = Request.create(QUERY, ITEMS, LABELS)
    result = runner.run(second.sequences)
    assert result.num_cached_tokens == len(QUERY) * len(ITEMS)
    assert result.num_computed_tokens - result.num_padding_tokens == sum(map(len, ITEMS))
    assert_same(result.scores, fresh_scores(tiny, QUERY, ITEMS))


def test_requests_of_one_batch_with_the_same_query_compute_it_once(runner):
    requests = [Request.create(QUERY, ITEMS, LABELS) for _ in range(3)]
    result = runner.run([seq for request in requests for seq in request.sequences])
    assert result.num_cached_tokens == len(QUERY) * (3 * len(ITEMS) - 1)
    assert len(runner.query_cache) == 1


def test_the_longest_cached_head_is_continued_and_scores_stay_exact(runner, tiny):
    system = QUERY[:30]
    runner.run(Request.create(system + (90, 91), ITEMS, LABELS).sequences)
    runner.run(Request.create(system + (92, 93, 94, 95, 96), ITEMS, LABELS).sequences)
    query = system + (97, 98, 99)  # shares 30 tokens with both; the longest head is 30
    result = runner.run(Request.create(query, ITEMS, LABELS).sequences)
    assert result.num_cached_tokens == len(query) * len(ITEMS) - 3  # only 3 query tokens computed
    assert_same(result.scores, fresh_scores(tiny, query, ITEMS))
    assert len(runner.query_cache) == 3


def test_a_query_that_extends_a_cached_one_computes_the_rest(runner, tiny):
    runner.run(Request.create(QUERY, ITEMS, LABELS).sequences)
    longer = QUERY + (100, 101, 102, 103)
    result = runner.run(Request.create(longer, ITEMS, LABELS).sequences)
    assert result.num_cached_tokens == len(longer) * len(ITEMS) - 4
    assert_same(result.scores, fresh_scores(tiny, longer, ITEMS))


def test_a_cached_query_longer_than_this_one_serves_all_but_its_last_token(runner, tiny):
    runner.run(Request.create(QUERY, ITEMS, LABELS).sequences)
    shorter = QUERY[:25]
    result = runner.run(Request.create(shorter, ITEMS, LABELS).sequences)
    assert result.num_cached_tokens == len(shorter) * len(ITEMS) - 1
    assert_same(result.scores, fresh_scores(tiny, shorter, ITEMS))


def test_item_first_requests_share_nothing_and_touch_no_cache(runner):
    request = Request.create((), [(1, 2, 3), (4, 5)], LABELS)  # item_first: no shared prefix
    result = runner.run(request.sequences)
    assert result.num_cached_tokens == 0 and len(runner.query_cache) == 0


def test_the_budget_bounds_the_cache_once_requests_leave(tiny):
    runner = ModelRunner(*tiny, query_cache_tokens=100)
    for first in range(10):  # 10 distinct 40-token queries: 400 tokens asked for
        runner.run(Request.create((first + 100, *QUERY[1:]), ITEMS, LABELS).sequences)
        runner.keep_only(())
        assert runner.query_cache.num_tokens <= 100
    assert len(runner.query_cache) == 2


def test_a_zero_budget_shares_a_query_only_within_its_request(tiny):
    runner = ModelRunner(*tiny, query_cache_tokens=0)
    request = Request.create(QUERY, ITEMS, LABELS)
    runner.run(request.sequences[:1])
    assert runner.run(request.sequences[1:]).num_cached_tokens == len(QUERY) * 2  # still held
    runner.keep_only(())
    result = runner.run(Request.create(QUERY, ITEMS, LABELS).sequences)
    assert result.num_cached_tokens == len(QUERY) * (len(ITEMS) - 1)  # computed again
