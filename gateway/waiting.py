"""WaitingRoom: requests that found no fresh worker wait here, bounded in number and time.

Owns the count of waiting requests (exported as scoringfleet_gateway_waiting_requests, the demand
signal that wakes a fleet from zero). Anything that may make a worker choosable calls notify().
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitingRoomFull(Exception):
    """More than max_waiting requests would be waiting."""


class WaitingRoom:
    def __init__(self, max_waiting: int) -> None:
        self.max_waiting = max_waiting
        self.num_waiting = 0
        self._changed = asyncio.Event()

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
        if self.num_waiting >= self.max_waiting:
            raise WaitingRoomFull(f"{self.num_waiting} requests already wait for a worker")
        deadline = time.monotonic() + timeout_s
        self.num_waiting += 1
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
            self.num_waiting -= 1
