"""Fault injection: answer chosen requests with an error instead of serving them, drop the open watch
streams, and log every request, so that tests can see how clients live through a bad API server.

Owns the rules, their hit counters, the watch epoch and the request log. Tests change them from their
own thread while the emulator's loop reads them: every access goes through one lock.
"""
import re
import threading
import time
from dataclasses import dataclass

# The reasons the real API server gives with these codes (metav1.StatusReason).
REASONS = {409: 'Conflict', 429: 'TooManyRequests', 500: 'InternalError', 502: 'BadGateway',
           503: 'ServiceUnavailable', 504: 'Timeout'}


@dataclass
class FaultRule:
    """Answer requests whose method matches (None: any), whose path and query match `path_regex`
    and, when given, whose body matches `body_regex` (re.search) with `status`, `times` times (None:
    until cleared). The body tells apart clients that send the same request to the same path (e.g.
    kopf's keep-alives, one peer's entry each)."""

    method: str | None
    path_regex: str
    status: int
    times: int | None
    hits: int = 0
    body_regex: str | None = None

    @property
    def reason(self) -> str:
        return REASONS.get(self.status, 'InternalError')

    @property
    def is_spent(self) -> bool:
        return self.times is not None and self.hits >= self.times

    def matches(self, method: str, path: str, body: str = '') -> bool:
        return ((self.method is None or self.method.upper() == method.upper())
                and re.search(self.path_regex, path) is not None
                and (self.body_regex is None or re.search(self.body_regex, body) is not None))


@dataclass(frozen=True)
class LoggedRequest:
    monotonic_s: float
    method: str
    path: str  # with the query string
    user_agent: str = ''


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._log: list[LoggedRequest] = []
        self._watch_epoch = 0

    def inject(self, method: str | None, path_regex: str, status: int, times: int | None,
               body_regex: str | None = None) -> FaultRule:
        """Add a rule (checked in the order added); returns it, so a test can read its `hits`."""
        if not 400 <= status <= 599:
            raise ValueError(f'an injected fault is an HTTP error status, got {status}')
        for pattern in (path_regex, body_regex or ''):
            re.compile(pattern)  # a bad pattern fails here, in the test, not inside the server
        rule = FaultRule(method, path_regex, status, times, body_regex=body_regex)
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def take(self, method: str, path: str, user_agent: str = '', body: str = '') -> FaultRule | None:
        """Log the request; the first unspent rule that matches it, counting the hit, or None."""
        with self._lock:
            self._log.append(LoggedRequest(time.monotonic(), method, path, user_agent))
            for rule in self._rules:
                if not rule.is_spent and rule.matches(method, path, body):
                    rule.hits += 1
                    return rule
        return None

    def drop_watches(self) -> None:
        """Every watch open now is cut (its connection closed mid-stream); new ones are served."""
        with self._lock:
            self._watch_epoch += 1

    @property
    def watch_epoch(self) -> int:
        with self._lock:
            return self._watch_epoch

    def requests(self, since_s: float = 0.0, method: str | None = None,
                 path_regex: str | None = None) -> list[LoggedRequest]:
        """Logged requests at or after time.monotonic() value `since_s`, optionally filtered."""
        with self._lock:
            logged = list(self._log)
        return [r for r in logged if r.monotonic_s >= since_s
                and (method is None or r.method.upper() == method.upper())
                and (path_regex is None or re.search(path_regex, r.path))]
