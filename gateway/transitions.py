"""The gateway's log of its workers: one line per change of a worker's state, with the reason.

The states are workers.WorkerState (worker_state() classifies; the gauge and /ready read the same).
A worker's record changes ~20 times a second (every poll); only a change of state makes a line.
Owns the state last logged per worker and each state's reason; the registry reports each change of
a record (WorkerRegistry's on_change), this never writes one.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gateway.config import API_KEY_ENV
from gateway.workers import Worker, WorkerState, worker_state

log = logging.getLogger("gateway.workers")
# The advice goes in the line: with different keys on gateway and servers nothing else says why.
UNAUTHORIZED_REASON = ("rejects the gateway's API key (401): not ready until it accepts it; the "
                       f"gateway and the servers must share one key (env {API_KEY_ENV})")
WARNING_STATES = (WorkerState.STALE, WorkerState.UNAUTHORIZED, WorkerState.DRAINING)


def state_reason(state: WorkerState, worker: Worker | None) -> str:
    """Why a worker is in `state`, for its log line; never empty."""
    if state is WorkerState.GONE:
        return "left the rotation"
    if state is WorkerState.UNAUTHORIZED:
        return UNAUTHORIZED_REASON
    if state is WorkerState.STALE:
        return (worker.failure or "failed") if worker.failed else "no /get_load answer lately"
    if state is WorkerState.DRAINING:
        return "answered 503 and closed the connection: shutting down"
    if state is WorkerState.LOADING:
        return "its model is loading (no work until it is loaded)"
    if state is WorkerState.JOINED:
        return ("waiting for its first /get_load answer" if worker.answered_at is None
                else "waiting for the API key check")
    return "/get_load answered"


def describe_error(error: BaseException) -> str:
    """An exception for a log line, never empty (a TimeoutError's str is '')."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class TransitionLog:
    """WorkerRegistry's on_change: `observe(url, record or None)` after each change. Built with the
    registry's stale_after_s and key_required, and the clock its times come from."""

    def __init__(self, stale_after_s: float, key_required: bool = False, logger: logging.Logger = log,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stale_after_s, self.key_required = stale_after_s, key_required
        self.logger, self.clock = logger, clock
        self._last: dict[str, WorkerState] = {}

    def observe(self, url: str, worker: Worker | None) -> None:
        state = worker_state(worker, self.clock(), self.stale_after_s, self.key_required)
        if self._last.get(url) == state or (worker is None and url not in self._last):
            return
        if state is WorkerState.GONE:
            self._last.pop(url, None)
        else:
            self._last[url] = state
        level = logging.WARNING if state in WARNING_STATES else logging.INFO
        self.logger.log(level, "worker %s: %s (%s)", url, state.value, state_reason(state, worker))
