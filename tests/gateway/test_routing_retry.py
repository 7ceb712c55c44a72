"""The Router in-process over real HTTP on loopback: a retry waits only within the request's one
deadline and gives
up at once when no untried worker is in rotation."""
from __future__ import annotations

import asyncio
import json
import time

import aiohttp

from gateway.config import GatewayConfig
from gateway.metrics import GatewayMetrics
from gateway.routing import Router
from gateway.waiting import WaitingRoom
from gateway.workers import WorkerRegistry
from tests.gateway.support import score_body

REFUSING = "http://127.0.0.1:1"  # nothing listens: connecting is refused
BODY = json.dumps(score_body()).encode()
HEADERS = {"content-type": "application/json"}


def make_router(session, urls, fresh, queue_timeout_s):
    config = GatewayConfig(worker_urls=tuple(urls), policy="round_robin",
                           queue_timeout_s=queue_timeout_s)
    registry = WorkerRegistry(stale_after_s=600)
    registry.set_urls(urls)
    for url in fresh:
        registry.record_answer(url, 0, registry.poll_started(url), time.monotonic())
    waiting = WaitingRoom(16)
    metrics = GatewayMetrics(waiting, registry)
    return Router(config, registry, waiting, metrics, session), registry, metrics


def test_a_single_refusing_worker_gives_up_at_once_with_503():
    async def main():
        async with aiohttp.ClientSession() as session:
            router, _, metrics = make_router(session, [REFUSING], [REFUSING], queue_timeout_s=600)
            # before the fix the retry waited a new 600 s for a worker outside those tried
            answer = await asyncio.wait_for(router.route(BODY, HEADERS), 10)
            return answer, metrics
    answer, metrics = asyncio.run(main())
    assert answer.status == 503 and answer.headers["retry-after"] == "1"
    assert b"no worker answered" in answer.body


def test_all_waits_of_one_request_end_at_its_queue_timeout():
    # The refusing worker becomes fresh only after 0.6 s (the request waits for it); the other is
    # in rotation but never fresh, so the retry waits for it until the deadline from arrival.
    queue_timeout_s = 1.0

    async def main():
        async with aiohttp.ClientSession() as session:
            router, registry, _ = make_router(session, [REFUSING, "http://127.0.0.1:9"], [],
                                              queue_timeout_s)

            async def freshen():
                await asyncio.sleep(0.6)
                registry.record_answer(REFUSING, 0, registry.poll_started(REFUSING),
                                       time.monotonic())
            started = time.monotonic()
            _, answer = await asyncio.gather(freshen(), router.route(BODY, HEADERS))
            return answer, time.monotonic() - started
    answer, elapsed_s = asyncio.run(main())
    assert answer.status == 503
    # a whole new queue timeout for the retry would make it 1.6 s
    assert elapsed_s < queue_timeout_s + 0.4
