"""The Router in-process over two real servers on loopback: a worker that answers 401 to the
gateway's own key is marked as refusing it (out of the choice, with a log line) and the request
moves on to another worker without using up its retry; the client never sees that 401."""
from __future__ import annotations

import asyncio
import json
import logging
import time

import aiohttp

from gateway.config import GatewayConfig
from gateway.intake import upstream_headers
from gateway.metrics import GatewayMetrics
from gateway.routing import Router
from gateway.transitions import TransitionLog
from gateway.waiting import WaitingRoom
from gateway.workers import WorkerRegistry
from tests.gateway.support import score_body
from tests.kit.runners import FakeRunner
from tests.kit.servers import serving

KEY = "the-gateways-key"
BODY = json.dumps(score_body()).encode()


def test_a_401_to_the_gateways_key_marks_the_worker_and_moves_on(caplog):
    with serving(FakeRunner(), api_key="another-key") as (other, _), \
            serving(FakeRunner(), api_key=KEY) as (good, _):
        async def main():
            config = GatewayConfig(worker_urls=(other, good), policy="round_robin", api_key=KEY)
            registry = WorkerRegistry(stale_after_s=600, key_required=True,
                                      on_change=TransitionLog(600, key_required=True).observe)
            registry.set_urls([other, good])
            for url in (other, good):  # as if a probe had said yes (the key changed since)
                registry.record_answer(url, 0, registry.poll_started(url), time.monotonic())
                registry.record_key(url, True)
            waiting = WaitingRoom(16)
            metrics = GatewayMetrics(waiting, registry)
            async with aiohttp.ClientSession() as session:
                router = Router(config, registry, waiting, metrics, session)
                headers = upstream_headers({"content-type": "application/json"}, KEY)
                answers = [await router.route(BODY, headers) for _ in range(3)]
            return answers, registry, metrics
        with caplog.at_level(logging.WARNING, logger="gateway.workers"):
            answers, registry, metrics = asyncio.run(main())
    assert [a.status for a in answers] == [200, 200, 200]  # round robin tried `other` first
    assert registry.get(other).key_accepted is False
    assert [w.url for w in registry.fresh(time.monotonic())] == [good]
    assert registry.counts_by_state(time.monotonic())["unauthorized"] == 1
    assert metrics.retries.labels(reason="unauthorized")._value.get() == 1  # once: then out
    assert metrics.retries.labels(reason="503")._value.get() == 0
    [line] = [r.getMessage() for r in caplog.records if "rejects the gateway's API key" in
              r.getMessage()]
    assert other in line and "SCORINGFLEET_API_KEY" in line and KEY not in line
