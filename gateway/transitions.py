"""The gateway's log of its workers: one line per change of a worker's state, with the reason.

States: `joined` (in rotation, no /get_load answer yet), `ready` (its last poll answered), `stale`
(a poll or a connection failed: why), `unauthorized` (it rejects the gateway's API key: key_check.py
says more), `draining` (it answered a draining 503), `gone` (it left the rotation). A worker's
record changes ~20 times a second (every poll); only a change of state makes a line. Owns the
state last logged per worker; the registry reports each change of a record (WorkerRegistry's
on_change), this never writes one.
"""
from __future__ import annotations

import logging

from gateway.workers import Worker

log = logging.getLogger("gateway.workers")


def worker_state(worker: Worker | None, is_gone: bool) -> tuple[str, str]:
    """(state, reason) of a worker's record; pure. `worker` None: not in rotation."""
    if worker is None:
        return ("gone", "left the rotation") if is_gone else ("unknown", "")
    if worker.failed:
        return "stale", worker.failure or "failed"
    if worker.key_accepted is False:
        return "unauthorized", "rejects the gateway's API key (401)"
    if worker.draining:
        return "draining", "answered 503 and closed the connection: shutting down"
    if worker.answered_at is None:
        return "joined", "waiting for its first /get_load answer"
    return "ready", "/get_load answered"


def describe_error(error: BaseException) -> str:
    """An exception for a log line, never empty (a TimeoutError's str is '')."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class TransitionLog:
    """WorkerRegistry's on_change: `observe(url, record or None, gone)` after each change."""

    def __init__(self, logger: logging.Logger = log) -> None:
        self.logger = logger
        self._last: dict[str, str] = {}

    def observe(self, url: str, worker: Worker | None, is_gone: bool) -> None:
        state, reason = worker_state(worker, is_gone)
        if self._last.get(url) == state:
            return
        if state in ("gone", "unknown"):
            self._last.pop(url, None)
        else:
            self._last[url] = state
        if state != "unknown":
            level = logging.WARNING if state in ("stale", "unauthorized", "draining") else logging.INFO
            self.logger.log(level, "worker %s: %s (%s)", url, state, reason)
