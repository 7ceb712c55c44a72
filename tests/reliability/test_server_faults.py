"""Server faults at scale, beyond tests/server (which covers one timeout, one failing batch, one
disconnect, one SIGTERM drain): many requests timing out behind a slow forward, and many clients
hanging up at once while others keep going. Afterwards nothing may be left behind: no sequence
waiting or running, no cached query, gauges 0, and every request counted exactly once (finished or
aborted). In-process (a live uvicorn over a SlowRunner) so the test can look inside the engine.
"""
from __future__ import annotations

import asyncio
from collections import Counter

import aiohttp
import httpx

from tests.kit.runners import SlowRunner
from tests.kit.servers import serving
from tests.kit.waiting import wait_for
from tests.server.test_load import read_gauges

NUM_ITEMS = 4


def body(n: int) -> dict:
    return {"query": [1, 2, 3], "items": [[10 + n % 50 + i] for i in range(NUM_ITEMS)],
            "label_token_ids": [1, 2]}


async def post(session: aiohttp.ClientSession, url: str, n: int) -> int:
    async with session.post(f"{url}/v1/score", json=body(n)) as response:
        await response.read()
        return response.status


def counters(url: str) -> tuple[float, float]:
    """(num_requests_total, num_aborted_requests_total) from /metrics."""
    text = httpx.get(f"{url}/metrics").text
    values = {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(("sglang:num_requests_total", "sglang:num_aborted_requests_total"))}
    return values["sglang:num_requests_total"], values["sglang:num_aborted_requests_total"]


def assert_nothing_left(url: str, engine, runner: SlowRunner) -> None:
    wait_for(lambda: httpx.get(f"{url}/get_load").json()[0]["num_reqs"] == 0)
    assert not engine.scheduler.waiting and not engine.scheduler.running
    wait_for(lambda: runner.kept == set())  # no query cache kept for a gone request
    with httpx.Client(base_url=url) as client:
        gauges = read_gauges(client)
    assert (gauges["num_running_reqs"], gauges["num_queue_reqs"], gauges["num_used_tokens"]) == (0, 0, 0)


def test_many_timeouts_behind_a_slow_forward_leave_nothing_behind():
    # 40 requests x 4 items = 160 sequences; 2 per 50 ms forward -> ~20 finish within the 0.5 s
    # timeout, the rest time out while waiting or while their batch runs.
    runner = SlowRunner(delay_s=0.05)
    with serving(runner, max_running_requests=2, request_timeout_s=0.5) as (url, engine):
        async def burst() -> list[int]:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
                return await asyncio.gather(*(post(session, url, n) for n in range(40)))
        statuses = Counter(asyncio.run(burst()))
        print(f"\nanswers: {dict(statuses)}; batches run: {len(runner.batches)}")
        assert set(statuses) == {200, 504} and statuses[504] > statuses[200] > 0, statuses
        assert_nothing_left(url, engine, runner)
        assert counters(url) == (statuses[200], statuses[504])  # each request counted once
        assert httpx.post(f"{url}/v1/score", json=body(0), timeout=10).status_code == 200


def test_many_clients_hanging_up_at_once_under_load_leave_nothing_behind():
    runner = SlowRunner(delay_s=0.02)
    num_leaving, num_staying = 30, 5
    with serving(runner, max_running_requests=2, request_timeout_s=30) as (url, engine):
        async def scene() -> list[int]:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
                leaving = [asyncio.create_task(post(session, url, n)) for n in range(num_leaving)]
                staying = [asyncio.create_task(post(session, url, 100 + n)) for n in range(num_staying)]
                for _ in range(500):  # bounded: until the server holds work running and waiting
                    load = engine.load()
                    if load.num_running and load.num_waiting > NUM_ITEMS * num_leaving // 2:
                        break
                    await asyncio.sleep(0.01)
                for task in leaving:  # all at once: each closes its connection
                    task.cancel()
                await asyncio.gather(*leaving, return_exceptions=True)
                return await asyncio.gather(*staying)
        stayed = asyncio.run(scene())
        assert stayed == [200] * num_staying
        assert_nothing_left(url, engine, runner)
        finished, aborted = counters(url)
        print(f"\n{num_leaving} hung up: {aborted:g} aborted, {finished - num_staying:g} had finished "
              f"first; {num_staying} stayed and got 200")
        assert finished + aborted == num_leaving + num_staying and aborted > num_leaving // 2
