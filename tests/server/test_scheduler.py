"""Scheduler invariants, without torch: limits, FIFO, admission, a sequence's lifecycle (schedule,
finish, fail, abort: the scheduler is its only writer), and truthful load."""
from __future__ import annotations

import pytest

from server.scheduler import QueueFull, Scheduler, SchedulerLimits
from server.sequence import Request, ScoringOptions, SequenceStatus

OPTIONS = ScoringOptions((1, 2), False)


def make_request(num_items: int, prefix_len: int = 2, item_len: int = 3) -> Request:
    return Request.create(tuple(range(prefix_len)), [tuple(range(item_len))] * num_items, OPTIONS)


def limits(running=100, prefill=10_000, total=10_000, queued=100) -> SchedulerLimits:
    return SchedulerLimits(running, prefill, total, queued)


@pytest.mark.parametrize(
    "limit, num_items, expected_batch",
    [
        pytest.param(limits(running=2), 5, 2, id="max_running_requests"),
        pytest.param(limits(prefill=12), 5, 2, id="max_prefill_tokens"),  # 5 tokens/seq: 2 fit
        pytest.param(limits(total=16), 5, 3, id="max_total_tokens"),
        pytest.param(limits(), 5, 5, id="everything-fits"),
    ],
)
def test_schedule_respects_limits(limit, num_items, expected_batch):
    scheduler = Scheduler(limit)
    scheduler.add(make_request(num_items))
    batch = scheduler.schedule()
    assert len(batch.sequences) == expected_batch
    assert all(seq.status is SequenceStatus.RUNNING for seq in batch.sequences)
    assert scheduler.load().num_running == expected_batch
    assert scheduler.load().num_waiting == num_items - expected_batch


@pytest.mark.parametrize("count_query_once, expected", [(True, 10), (False, 1)],
                         ids=["shared-prefix-forwards", "padded-rows"])
def test_the_prefill_budget_counts_a_query_once_per_batch_where_the_forwards_hold_it_once(
        count_query_once, expected):
    scheduler = Scheduler(SchedulerLimits(100, 2_000, 100_000, 100, count_query_once=count_query_once))
    scheduler.add(make_request(10, prefix_len=1_000, item_len=50))
    scheduler.add(make_request(10, prefix_len=1_000, item_len=50))
    batch = scheduler.schedule()
    # Held once: the first request whole (1,000 + 10 x 50 = 1,500; the second's query would pass
    # 2,000). A padded cache holds the query per row: 2 x 1,050 > 2,000, so one item.
    assert len(batch.sequences) == expected and len(batch.requests) == 1
    assert scheduler.load().num_running_tokens == expected * 1_050  # usage counts each whole


def test_running_tokens_count_against_total_budget_until_released():
    scheduler = Scheduler(limits(total=10))  # 5 tokens per sequence
    scheduler.add(make_request(4))
    first = scheduler.schedule()
    assert len(first.sequences) == 2
    assert scheduler.schedule() is None  # budget held by the running batch
    scheduler.finish(first, [[0.5, 0.5]] * 2)
    second = scheduler.schedule()  # "full" recomputed from state: not latched (SGLang #22518)
    assert len(second.sequences) == 2


def test_a_sequence_over_the_prefill_budget_runs_alone():
    scheduler = Scheduler(limits(prefill=4))  # every sequence is 5 tokens
    scheduler.add(make_request(2))
    assert len(scheduler.schedule().sequences) == 1
    assert len(scheduler.schedule().sequences) == 1  # the first is still running: total allows it


def test_fifo_does_not_skip_a_large_head():
    scheduler = Scheduler(limits(prefill=10))
    big = make_request(1, prefix_len=0, item_len=8)
    small = make_request(3, prefix_len=0, item_len=1)
    scheduler.add(big)
    scheduler.add(small)
    batch = scheduler.schedule()
    # The head (8 tokens) goes first; 2 small ones fit behind it; without FIFO all 3 would.
    assert [seq.request for seq in batch.sequences] == [big, small, small]


def test_add_is_all_or_nothing_at_the_queue_cap():
    scheduler = Scheduler(limits(queued=5))
    scheduler.add(make_request(3))
    with pytest.raises(QueueFull, match="max_queued_requests=5"):
        scheduler.add(make_request(3))
    assert scheduler.load().num_waiting == 3
    scheduler.add(make_request(2))
    assert scheduler.load().num_waiting == 5


def test_abort_removes_waiting_and_leaves_running_until_delivered():
    scheduler = Scheduler(limits(running=2))
    request = make_request(5)
    scheduler.add(request)
    batch = scheduler.schedule()
    scheduler.abort(request)
    load = scheduler.load()
    assert (load.num_running, load.num_waiting) == (2, 0)
    assert sum(seq.status is SequenceStatus.ABORTED for seq in request.sequences) == 3
    assert scheduler.finish(batch, [[0.1, 0.2]] * 2) == [request]  # done: the rest was aborted
    assert scheduler.running == [] and scheduler.live_request_ids() == set()
    assert request.is_done


def test_load_is_derived_from_state_at_every_moment():
    scheduler = Scheduler(limits(running=3))
    first, second = make_request(2), make_request(4, prefix_len=1, item_len=1)
    scheduler.add(first)
    scheduler.add(second)
    assert scheduler.load().num_tokens == 2 * 5 + 4 * 2
    batch = scheduler.schedule()
    load = scheduler.load()
    assert (load.num_running, load.num_waiting, load.num_reqs) == (3, 3, 6)
    assert load.num_running_tokens == 5 + 5 + 2
    finished = scheduler.finish(batch, [[0.1, 0.2]] * 3)
    # No release step between a batch's end and the gauge: it tells the truth at once.
    assert finished == [first]  # the second request still has 3 sequences waiting
    load = scheduler.load()
    assert (load.num_running, load.num_waiting, load.num_running_tokens) == (0, 3, 0)
    assert [seq.scores for seq in first.sequences] == [[0.1, 0.2]] * 2


def test_schedule_on_empty_queue_returns_none_and_releases():
    scheduler = Scheduler(limits())
    scheduler.add(make_request(1))
    batch = scheduler.schedule()
    scheduler.finish(batch, [[0.0, 0.0]])
    assert scheduler.schedule() is None
    assert scheduler.running == []


def test_batch_lists_each_request_once_in_order():
    scheduler = Scheduler(limits())
    first, second = make_request(2), make_request(2)
    scheduler.add(first)
    scheduler.add(second)
    batch = scheduler.schedule()
    assert batch.requests == [first, second]
    assert batch.num_tokens == 20


def test_finish_needs_one_score_row_per_sequence():
    scheduler = Scheduler(limits())
    scheduler.add(make_request(2))
    with pytest.raises(ValueError):
        scheduler.finish(scheduler.schedule(), [[0.5, 0.5]])


def test_fail_ends_the_batch_and_its_requests_waiting_sequences():
    scheduler = Scheduler(limits(running=2))
    failing, other = make_request(3), make_request(1)
    scheduler.add(failing)
    scheduler.add(other)
    batch = scheduler.schedule()  # 2 of `failing`; its third and `other` wait
    assert scheduler.fail(batch) == [failing]
    assert failing.is_done and all(seq.scores is None for seq in failing.sequences)
    assert [seq.request for seq in scheduler.waiting] == [other]
    assert scheduler.load().num_running == 0


def test_abort_all_empties_both_collections():
    scheduler = Scheduler(limits(running=2))
    first, second = make_request(2), make_request(2)
    scheduler.add(first)
    scheduler.add(second)
    scheduler.schedule()
    assert scheduler.abort_all() == [first, second]
    assert scheduler.load().num_reqs == 0 and first.is_done and second.is_done
    assert all(seq.status is SequenceStatus.ABORTED for seq in (*first.sequences, *second.sequences))
