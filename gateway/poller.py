"""Poller: one task per worker in rotation, GET /get_load every load interval, answers and
failures (with why) reported to the registry. Starts and stops tasks as the rotation changes (sync). With an
API key, a worker that answers is also asked whether it takes the key (key_check.py): once while
unknown, then every KEY_RECHECK_S while it refuses it. A worker that serves is asked its GET
/v1/models once per process (its ids to the registry, the listing to on_models: its fleet's names)."""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

import aiohttp

from gateway.key_check import KEY_RECHECK_S, key_header, probe_key
from gateway.served import Listing, parse_listing
from gateway.transitions import describe_error
from gateway.workers import WorkerRegistry
from scoringfleet_contract.facts import LOAD_PATH, LOADING_HEADER, MODELS_PATH

log = logging.getLogger(__name__)


def is_loading(headers) -> bool:
    """A worker still loading its model: its load is 0 and it takes no request. A server without
    the header (SGLang's) answers /get_load only once it serves."""
    return headers.get(LOADING_HEADER, "").strip().lower() == "true"


def parse_load(payload) -> int:
    """num_reqs summed over data-parallel ranks (a list of entries; a bare entry is accepted)."""
    entries = payload if isinstance(payload, list) else [payload]
    return sum(int(entry["num_reqs"]) for entry in entries)


class Poller:
    def __init__(self, registry: WorkerRegistry, session: aiohttp.ClientSession,
                 interval_s: float, timeout_s: float, on_change: Callable[[], None],
                 api_key: str | None = None, on_models: Callable[[Listing], None] | None = None) -> None:
        self.registry, self.session = registry, session
        self.on_models = on_models  # a worker listed its models (the fleet learns its names)
        self.interval_s, self.timeout_s, self.on_change = interval_s, timeout_s, on_change
        self.api_key = api_key
        self._tasks: dict[str, asyncio.Task] = {}
        self._key_probed_at: dict[str, float] = {}  # monotonic seconds of each worker's last probe

    def sync(self) -> None:
        """A task for every worker in rotation, none for the others."""
        urls = set(self.registry.urls())
        for url in list(self._tasks.keys() - urls):
            self._tasks.pop(url).cancel()
            self._key_probed_at.pop(url, None)
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
            async with self.session.get(f"{url}{LOAD_PATH}", timeout=timeout) as response:
                response.raise_for_status()
                num_reqs = parse_load(await response.json(content_type=None))
                loading = is_loading(response.headers)
        except (TimeoutError, aiohttp.ClientError, ValueError, KeyError, TypeError) as error:
            # The registry's transition log says it (once): out of rotation until it answers.
            self.registry.record_failure(url, f"/get_load failed: {describe_error(error)}")
            return
        self.registry.record_answer(url, num_reqs, mark, time.monotonic(), loading)
        await self._check_key(url)
        if not loading:
            await self._ask_models(url)
        self.on_change()

    async def _ask_models(self, url: str) -> None:
        """Once per worker process (its /v1/models is fixed at its start): the ids it serves, its
        adapters among them. A failure that may pass (no connection, a timeout, a 5xx: loading) is
        asked again at the next poll; a 4xx or a body that is no list is an answer: no models."""
        worker = self.registry.get(url)
        if worker is None or worker.models is not None:
            return
        headers = key_header(self.api_key)
        try:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            async with self.session.get(f"{url}{MODELS_PATH}", headers=headers, timeout=timeout) as response:
                body = await response.read()
        except (TimeoutError, aiohttp.ClientError) as error:
            log.debug("%s%s: %s", url, MODELS_PATH, describe_error(error))
            return
        if response.status >= 500:
            return
        try:
            listing = parse_listing(json.loads(body) if response.status == 200 else None)
        except ValueError as error:  # not JSON (json.JSONDecodeError) or not a list
            log.info("%s%s lists no model (HTTP %s: %s)", url, MODELS_PATH, response.status, error)
            self.registry.record_models(url, ())
            return
        self.registry.record_models(url, listing.ids)
        if self.on_models is not None:
            self.on_models(listing)

    async def _check_key(self, url: str) -> None:
        worker, now = self.registry.get(url), time.monotonic()
        if self.api_key is None or worker is None or worker.key_accepted is True:
            return
        if (worker.key_accepted is False
                and now - self._key_probed_at.get(url, -KEY_RECHECK_S) < KEY_RECHECK_S):
            return
        self._key_probed_at[url] = now
        accepted = await probe_key(self.session, url, self.api_key, self.timeout_s)
        if accepted is not None:
            self.registry.record_key(url, accepted)
