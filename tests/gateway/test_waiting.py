"""WaitingRoom: bounded in number and time; a full room says when a place is sure to be free
(the first waiter's deadline), which is what the gateway's 503 puts in Retry-After."""
from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from gateway.waiting import WaitingRoom, WaitingRoomFull, seconds_until_a_place
from tests.gateway.test_routing_retry import BODY, HEADERS, make_router


@pytest.mark.parametrize("deadlines,now,expected", [
    ([], 0.0, 1),  # nobody waits (a room of 0): nothing to wait for
    ([300.0], 0.0, 300),  # a wake from zero on a GPU: minutes, not "1"
    ([300.0, 100.5, 200.0], 0.0, 101),  # the first deadline, rounded up
    ([10.2], 10.0, 1),  # at least 1
    ([5.0], 9.0, 1),  # a deadline already past (the waiter is leaving now)
], ids=["empty", "one", "earliest-rounded-up", "under-a-second", "past"])
def test_seconds_until_a_place(deadlines, now, expected):
    assert seconds_until_a_place(deadlines, now) == expected


async def test_a_full_room_refuses_with_the_time_until_its_first_waiter_leaves():
    room = WaitingRoom(max_waiting=2)
    never = lambda: None  # noqa: E731 (no worker ever turns choosable)
    first = asyncio.create_task(room.take(never, 120.0))
    await asyncio.sleep(0.05)
    second = asyncio.create_task(room.take(never, 300.0))
    await asyncio.sleep(0.05)
    assert room.num_waiting == 2
    with pytest.raises(WaitingRoomFull) as full:
        await room.take(never, 300.0)
    assert full.value.retry_after_s == 120  # the first waiter's deadline, not the newest's
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert room.num_waiting == 1  # a cancelled waiter (a client gone) frees its place
    third = asyncio.create_task(room.take(never, 300.0))
    await asyncio.sleep(0.05)
    with pytest.raises(WaitingRoomFull) as full:
        await room.take(never, 300.0)
    assert 299 <= full.value.retry_after_s <= 300  # now the second waiter's deadline comes first
    third.cancel()
    second.cancel()
    await asyncio.gather(third, return_exceptions=True)
    await asyncio.gather(second, return_exceptions=True)
    assert room.num_waiting == 0


async def test_waiters_with_the_same_deadline_are_each_counted():
    room = WaitingRoom(max_waiting=4)
    chosen: list[str] = []
    tasks = [asyncio.create_task(room.take(lambda: chosen[0] if chosen else None, 60.0))
             for _ in range(3)]
    await asyncio.sleep(0.05)
    assert room.num_waiting == 3
    chosen.append("worker")
    room.notify()
    assert await asyncio.gather(*tasks) == ["worker"] * 3
    assert room.num_waiting == 0


async def test_the_gateways_503_for_a_full_room_carries_that_retry_after():
    # A fleet at zero pods behind a gateway with a 300 s queue timeout: the room fills with
    # requests waiting for the wake; the next is told to come back when a place frees.
    async with aiohttp.ClientSession() as session:
        router, _, _ = make_router(session, ["http://127.0.0.1:9"], [], queue_timeout_s=300)
        router.waiting = WaitingRoom(max_waiting=1)
        router.metrics.waiting = router.waiting
        waiter = asyncio.create_task(router.route(BODY, HEADERS))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        answer = await router.route(BODY, HEADERS)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
    assert time.monotonic() - started < 1  # refused at once, not held
    assert answer.status == 503
    assert 299 <= int(answer.headers["retry-after"]) <= 300
    assert json.loads(answer.body)["message"] == "1 requests already wait for a worker"
