"""Poller: one task per worker in rotation, GET /get_load every load interval, answers and
failures (with why) reported to the registry. Starts and stops tasks as the rotation changes (sync)."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp

from gateway.transitions import describe_error
from gateway.workers import WorkerRegistry


def parse_load(payload) -> int:
    """num_reqs summed over data-parallel ranks (a list of entries; a bare entry is accepted)."""
    entries = payload if isinstance(payload, list) else [payload]
    return sum(int(entry["num_reqs"]) for entry in entries)


class Poller:
    def __init__(self, registry: WorkerRegistry, session: aiohttp.ClientSession,
                 interval_s: float, timeout_s: float, on_change: Callable[[], None]) -> None:
        self.registry, self.session = registry, session
        self.interval_s, self.timeout_s, self.on_change = interval_s, timeout_s, on_change
        self._tasks: dict[str, asyncio.Task] = {}

    def sync(self) -> None:
        """A task for every worker in rotation, none for the others."""
        urls = set(self.registry.urls())
        for url in list(self._tasks.keys() - urls):
            self._tasks.pop(url).cancel()
        for url in urls - self._tasks.keys():
            self._tasks[url] = asyncio.create_task(self._poll_forever(url), name=f"poll {url}")

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _poll_forever(self, url: str) -> None:
        while self.registry.get(url) is not None:
            await self.poll_once(url)
            await asyncio.sleep(self.interval_s)

    async def poll_once(self, url: str) -> None:
        mark = self.registry.poll_started(url)
        try:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            async with self.session.get(f"{url}/get_load", timeout=timeout) as response:
                response.raise_for_status()
                num_reqs = parse_load(await response.json(content_type=None))
        except (TimeoutError, aiohttp.ClientError, ValueError, KeyError, TypeError) as error:
            # The registry's transition log says it (once): out of rotation until it answers.
            self.registry.record_failure(url, f"/get_load failed: {describe_error(error)}")
            return
        self.registry.record_answer(url, num_reqs, mark, time.monotonic())
        self.on_change()
