"""The gateway's log of its workers: one line per change of a worker's state, with the reason.

States: `joined` (in rotation, no /get_load answer yet, or with a key not yet checked), `loading`
(it answers, but its model is still loading: a new or restarted server), `ready`
(usable: its last poll answered), `stale` (a poll or a connection failed: why), `unauthorized` (it
rejects the gateway's API key: key_check.py's probe or a routed request's 401 said so),
`draining` (it answered a draining 503), `gone` (it left the rotation). A worker's
record changes ~20 times a second (every poll); only a change of state makes a line. Owns the
state last logged per worker; the registry reports each change of a record (WorkerRegistry's
on_change), this never writes one.
"""
from __future__ import annotations

import logging

from gateway.config import API_KEY_ENV
from gateway.workers import Worker

log = logging.getLogger("gateway.workers")
# The advice goes in the line: with different keys on gateway and servers nothing else says why.
UNAUTHORIZED_REASON = ("rejects the gateway's API key (401): not ready until it accepts it; the "
                       f"gateway and the servers must share one key (env {API_KEY_ENV})")


def worker_state(worker: Worker | None, is_gone: bool,
                 key_required: bool = False) -> tuple[str, str]:
    """(state, reason) of a worker's record; pure. `worker` None: not in rotation. With
    `key_required` (the gateway has a key) a worker is ready only once it is known to accept it,
    as for the picker and /ready (Worker.is_fresh)."""
    if worker is None:
        return ("gone", "left the rotation") if is_gone else ("unknown", "")
    if worker.failed:
        return "stale", worker.failure or "failed"
    if worker.key_accepted is False:
        return "unauthorized", UNAUTHORIZED_REASON
    if worker.draining:
        return "draining", "answered 503 and closed the connection: shutting down"
    if worker.loading:
        return "loading", "its model is loading (no work until it is loaded)"
    if worker.answered_at is None:
        return "joined", "waiting for its first /get_load answer"
    if key_required and worker.key_accepted is None:
        return "joined", "waiting for the API key check"
    return "ready", "/get_load answered"


def describe_error(error: BaseException) -> str:
    """An exception for a log line, never empty (a TimeoutError's str is '')."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class TransitionLog:
    """WorkerRegistry's on_change: `observe(url, record or None, gone)` after each change."""

    def __init__(self, logger: logging.Logger = log, key_required: bool = False) -> None:
        self.logger, self.key_required = logger, key_required
        self._last: dict[str, str] = {}

    def observe(self, url: str, worker: Worker | None, is_gone: bool) -> None:
        state, reason = worker_state(worker, is_gone, self.key_required)
        if self._last.get(url) == state:
            return
        if state in ("gone", "unknown"):
            self._last.pop(url, None)
        else:
            self._last[url] = state
        if state != "unknown":
            level = logging.WARNING if state in ("stale", "unauthorized", "draining") else logging.INFO
            self.logger.log(level, "worker %s: %s (%s)", url, state, reason)
