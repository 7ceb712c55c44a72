"""The workers' log: a real WorkerRegistry reporting to a TransitionLog; one line per change of
state, each with its reason; pure worker_state(), state_reason() and describe_error() tabled."""
import asyncio
import logging

import pytest

from gateway.transitions import TransitionLog, describe_error, state_reason
from gateway.workers import Worker, WorkerRegistry, WorkerState, worker_state

A = "http://10.0.0.1:30000"


def NOW() -> float:
    """The logs' clock below: every answer they see (1.0 to 2.1 s) is within their 10 s."""
    return 2.1


UNAUTHORIZED = ("unauthorized", "rejects the gateway's API key (401): not ready until it accepts it; the "
                "gateway and the servers must share one key (env SCORINGFLEET_API_KEY)")


@pytest.mark.parametrize(("worker", "expected"), [
    (None, ("gone", "left the rotation")),
    (Worker(A), ("joined", "waiting for its first /get_load answer")),
    (Worker(A, answered_at=1.0), ("ready", "/get_load answered")),
    (Worker(A, answered_at=1.0, failed=True, failure="/get_load failed: TimeoutError"),
     ("stale", "/get_load failed: TimeoutError")),
    (Worker(A, failed=True), ("stale", "failed")),  # never an empty reason
    (Worker(A, answered_at=0.0), ("stale", "no /get_load answer lately")),  # older than stale_after_s
    (Worker(A, answered_at=1.0, draining=True),
     ("draining", "answered 503 and closed the connection: shutting down")),
    (Worker(A, answered_at=1.0, key_accepted=False), UNAUTHORIZED),
    # one state for the log, the gauge and /ready: a refused key wins over a failure
    (Worker(A, answered_at=1.0, failed=True, key_accepted=False), UNAUTHORIZED),
    (Worker(A, answered_at=1.0, loading=True), ("loading", "its model is loading (no work until it is loaded)")),
], ids=["gone", "joined", "ready", "stale", "stale-no-reason", "stale-by-time", "draining", "unauthorized",
        "unauthorized-and-failed", "loading"])
def test_worker_state(worker, expected):
    state = worker_state(worker, now=1.2, stale_after_s=0.5)
    assert (state.value, state_reason(state, worker)) == expected


@pytest.mark.parametrize(("worker", "expected"), [
    (Worker(A, answered_at=1.0), ("joined", "waiting for the API key check")),
    (Worker(A, answered_at=1.0, key_accepted=True), ("ready", "/get_load answered")),
], ids=["key-unknown", "key-accepted"])
def test_with_a_key_a_worker_is_ready_only_once_it_accepts_it(worker, expected):
    # as for the picker and /ready: an answered poll alone does not make it usable
    state = worker_state(worker, now=1.2, stale_after_s=0.5, key_required=True)
    assert (state.value, state_reason(state, worker)) == expected
    assert worker.is_fresh(1.2, 0.5, key_required=True) is (state is WorkerState.READY)


@pytest.mark.parametrize(("error", "expected"), [
    (TimeoutError(), "TimeoutError"),
    (asyncio.TimeoutError(), "TimeoutError"),
    (ValueError("bad json"), "ValueError: bad json"),
    (KeyError("num_reqs"), "KeyError: 'num_reqs'"),
])
def test_describe_error_is_never_empty(error, expected):
    assert describe_error(error) == expected


def test_a_worker_life_logs_one_line_per_change(caplog):
    logger = logging.getLogger("test.transitions")
    registry = WorkerRegistry(stale_after_s=1.0, on_change=TransitionLog(10.0, logger=logger, clock=NOW).observe)
    with caplog.at_level(logging.INFO, logger="test.transitions"):
        registry.set_urls([A])
        for now in (1.0, 1.05, 1.1):  # three answers: one transition
            registry.record_answer(A, 0, 0, now)
        registry.record_failure(A, "/get_load failed: TimeoutError")
        registry.record_failure(A, "/get_load failed: TimeoutError")  # the same state: no line
        registry.record_answer(A, 0, 0, 2.0)
        registry.record_draining(A)
        registry.record_draining(A)
        registry.record_answer(A, 0, 0, 2.1)  # a draining worker still answers its polls
        registry.record_failure(A, "/v1/score unreachable: refused: ...")  # it exited
        registry.set_urls([])
        registry.set_urls([])
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [
        ("INFO", f"worker {A}: joined (waiting for its first /get_load answer)"),
        ("INFO", f"worker {A}: ready (/get_load answered)"),
        ("WARNING", f"worker {A}: stale (/get_load failed: TimeoutError)"),
        ("INFO", f"worker {A}: ready (/get_load answered)"),
        ("WARNING", f"worker {A}: draining (answered 503 and closed the connection: shutting down)"),
        ("WARNING", f"worker {A}: stale (/v1/score unreachable: refused: ...)"),
        ("INFO", f"worker {A}: gone (left the rotation)"),
    ]


def test_a_worker_that_comes_back_joins_again(caplog):
    logger = logging.getLogger("test.transitions")
    registry = WorkerRegistry(stale_after_s=1.0, on_change=TransitionLog(10.0, logger=logger, clock=NOW).observe)
    with caplog.at_level(logging.INFO, logger="test.transitions"):
        registry.set_urls([A])
        registry.set_urls([])
        registry.set_urls([A])
    assert [r.getMessage().split(": ")[1].split(" ")[0] for r in caplog.records] == \
        ["joined", "gone", "joined"]


def test_a_key_verdict_is_a_transition(caplog):
    # the poll answers all along (/get_load is open): only the key probe's verdict moves the state
    logger = logging.getLogger("test.transitions")
    registry = WorkerRegistry(stale_after_s=1.0, key_required=True,
                              on_change=TransitionLog(10.0, True, logger, NOW).observe)
    with caplog.at_level(logging.INFO, logger="test.transitions"):
        registry.set_urls([A])
        registry.record_answer(A, 0, 0, 1.0)  # not yet usable: still joined, no line
        registry.record_key(A, False)
        registry.record_answer(A, 0, 0, 1.05)  # still refusing: no line
        registry.record_key(A, True)
    assert [r.getMessage() for r in caplog.records] == [
        f"worker {A}: joined (waiting for its first /get_load answer)",
        f"worker {A}: unauthorized (rejects the gateway's API key (401): not ready until it "
        "accepts it; the gateway and the servers must share one key (env SCORINGFLEET_API_KEY))",
        f"worker {A}: ready (/get_load answered)",
    ]


def test_an_answer_later_than_stale_after_logs_the_stale_spell_it_ends(caplog):
    # No failure marked it: the worker was stale by time only, and the router passed it over.
    logger = logging.getLogger("test.transitions")
    clock = [1.0]
    registry = WorkerRegistry(stale_after_s=0.5,
                              on_change=TransitionLog(0.5, logger=logger, clock=lambda: clock[0]).observe)
    with caplog.at_level(logging.INFO, logger="test.transitions"):
        registry.set_urls([A])
        for now in (1.0, 1.4, 1.8):  # each within 0.5 s of the last: no line
            clock[0] = now
            registry.record_answer(A, 0, 0, now)
        clock[0] = 2.6  # 0.8 s after the last answer
        registry.record_answer(A, 0, 0, 2.6)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", f"worker {A}: joined (waiting for its first /get_load answer)"),
        ("INFO", f"worker {A}: ready (/get_load answered)"),
        ("WARNING", f"worker {A}: stale (no /get_load answer lately)"),
        ("INFO", f"worker {A}: ready (/get_load answered)"),
    ]
