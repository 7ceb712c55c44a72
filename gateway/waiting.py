"""WaitingRoom: requests that found no fresh worker wait here, bounded in number and time.

Owns the waiting requests' deadlines, hence their count (exported as
scoringfleet_gateway_waiting_requests, the demand signal that wakes a fleet from zero) and when the
next place frees (a full room's Retry-After). Anything that may make a worker choosable calls notify().
"""
from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Callable, Collection
from typing import TypeVar

T = TypeVar("T")


class WaitingRoomFull(Exception):
    """More than max_waiting requests would be waiting. retry_after_s: when a place is sure to be
    free, for the 503's Retry-After."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def seconds_until_a_place(deadlines: Collection[float], now: float) -> int:
    """Whole seconds (at least 1) until the first waiter's deadline: a place is free by then at
    the latest, sooner if a worker turns ready. With a long queue timeout (a wake from zero on a
    GPU takes minutes) that can be minutes, and a client told "1" would only be refused again."""
    if not deadlines:
        return 1
    return max(1, math.ceil(min(deadlines) - now))


class WaitingRoom:
    def __init__(self, max_waiting: int) -> None:
        self.max_waiting = max_waiting
        self._deadlines: Counter[float] = Counter()  # one per waiting request (monotonic seconds)
        self._changed = asyncio.Event()

    @property
    def num_waiting(self) -> int:
        return self._deadlines.total()

    def notify(self) -> None:
        """Wake every waiter to try again (a worker answered, joined or left)."""
        if self.num_waiting:
            self._changed.set()
            self._changed = asyncio.Event()

    async def take(self, choose: Callable[[], T | None], timeout_s: float) -> T | None:
        """choose() at once; else wait (counted) until it returns something or timeout_s passes.
        Returns None on timeout; raises WaitingRoomFull when no place is left."""
        chosen = choose()
        if chosen is not None:
            return chosen
        now = time.monotonic()
        if self.num_waiting >= self.max_waiting:
            raise WaitingRoomFull(f"{self.num_waiting} requests already wait for a worker",
                                  seconds_until_a_place(list(self._deadlines), now))
        deadline = now + timeout_s
        self._deadlines[deadline] += 1
        try:
            while (remaining := deadline - time.monotonic()) > 0:
                changed = self._changed
                try:
                    # NOTE: freshness also changes with time alone, so look again at least every 0.1 s.
                    await asyncio.wait_for(changed.wait(), min(remaining, 0.1))
                except TimeoutError:
                    pass
                chosen = choose()
                if chosen is not None:
                    return chosen
            return None
        finally:
            self._deadlines[deadline] -= 1
            if not self._deadlines[deadline]:
                del self._deadlines[deadline]
