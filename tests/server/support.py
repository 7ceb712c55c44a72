"""What only the server's tests share: an event loop for one coroutine, the warnings a test's log
holds. The kit the tests of several packages share (fake runners, the tiny model, live servers,
bounded waits) is tests/kit/."""
from __future__ import annotations

import asyncio
import logging


def run_async(coro):
    return asyncio.run(coro)


def warnings_of(caplog) -> list[str]:
    """The WARNING-and-above messages (another test may have left a logger at INFO)."""
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
