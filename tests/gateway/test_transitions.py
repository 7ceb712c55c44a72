"""The workers' log: a real WorkerRegistry reporting to a TransitionLog; one line per change of
state, each with its reason; pure worker_state() and describe_error() tabled."""
import asyncio
import logging

import pytest

from gateway.transitions import TransitionLog, describe_error, worker_state
from gateway.workers import Worker, WorkerRegistry

A = "http://10.0.0.1:30000"


@pytest.mark.parametrize(("worker", "gone", "expected"), [
    (None, True, ("gone", "left the rotation")),
    (None, False, ("unknown", "")),
    (Worker(A), False, ("joined", "waiting for its first /get_load answer")),
    (Worker(A, answered_at=1.0), False, ("ready", "/get_load answered")),
    (Worker(A, answered_at=1.0, failed=True, failure="/get_load failed: TimeoutError"), False,
     ("stale", "/get_load failed: TimeoutError")),
    (Worker(A, failed=True), False, ("stale", "failed")),  # never an empty reason
    (Worker(A, answered_at=1.0, draining=True), False,
     ("draining", "answered 503 and closed the connection: shutting down")),
    (Worker(A, answered_at=1.0, key_accepted=False), False,
     ("unauthorized", "rejects the gateway's API key (401): not ready until it accepts it; the "
                      "gateway and the servers must share one key (env SCORINGFLEET_API_KEY)")),
    (Worker(A, answered_at=1.0, loading=True), False,
     ("loading", "its model is loading (no work until it is loaded)")),
], ids=["gone", "unknown", "joined", "ready", "stale", "stale-no-reason", "draining", "unauthorized",
        "loading"])
def test_worker_state(worker, gone, expected):
    assert worker_state(worker, gone) == expected


@pytest.mark.parametrize(("worker", "expected"), [
    (Worker(A, answered_at=1.0), ("joined", "waiting for the API key check")),
    (Worker(A, answered_at=1.0, key_accepted=True), ("ready", "/get_load answered")),
], ids=["key-unknown", "key-accepted"])
def test_with_a_key_a_worker_is_ready_only_once_it_accepts_it(worker, expected):
    # as for the picker and /ready: an answered poll alone does not make it usable
    assert worker_state(worker, False, key_required=True) == expected


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
    registry = WorkerRegistry(stale_after_s=1.0, on_change=TransitionLog(logger).observe)
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
    registry = WorkerRegistry(stale_after_s=1.0, on_change=TransitionLog(logger).observe)
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
                              on_change=TransitionLog(logger, key_required=True).observe)
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
