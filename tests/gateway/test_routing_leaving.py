"""The Router in-process over real HTTP on loopback: workers that are leaving (an exited one refuses
connections while it is still in rotation) cost a request no failure, at most one attempt each."""
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
from tests.kit.runners import FakeRunner
from tests.kit.servers import serving

# Nothing listens on these: connecting is refused. Round robin orders workers by URL: ":1" comes
# before a free port's URL (":3xxxx" to ":6xxxx") and ":9" after it, so the first request tries ":1"
# and then, on the retry's turn, ":9".
EXITED = ("http://127.0.0.1:1", "http://127.0.0.1:9")


async def route_all(live_url: str, num_requests: int) -> tuple[list[int], GatewayMetrics]:
    urls = (*EXITED, live_url)
    config = GatewayConfig(worker_urls=urls, policy="round_robin", queue_timeout_s=1)
    registry = WorkerRegistry(stale_after_s=60)
    registry.set_urls(urls)
    for url in urls:  # all fresh: as just before the watch event or a failed poll drops the exited
        registry.record_answer(url, 0, registry.poll_started(url), time.monotonic())
    waiting = WaitingRoom(16)
    metrics = GatewayMetrics(waiting, registry)
    body = json.dumps(score_body()).encode()
    async with aiohttp.ClientSession() as session:
        router = Router(config, registry, waiting, metrics, session)
        answers = [await router.route(body, {"content-type": "application/json"})
                   for _ in range(num_requests)]
    return [a.status for a in answers], metrics


def test_two_exited_workers_still_in_rotation_cost_no_request_a_failure():
    with serving(FakeRunner()) as (live_url, _):
        assert EXITED[0] < live_url < EXITED[1]
        codes, metrics = asyncio.run(route_all(live_url, 4))
    # with one retry only, the first request went to one exited worker, then the other: 502
    assert codes == [200] * 4
    assert metrics.retries.labels(reason="refused")._value.get() == 2
