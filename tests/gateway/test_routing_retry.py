"""The Router in-process over real HTTP on loopback: a retry waits only within the request's one
deadline, gives up at once when no untried worker is in rotation, and is counted only if made."""
from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway import proxy
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
    assert metrics.retries.labels(reason="refused")._value.get() == 0  # no retry was made


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


def test_a_503_with_no_other_worker_counts_no_retry():
    async def main():
        app = web.Application()
        app.router.add_post("/v1/score", lambda _: web.json_response({"message": "full"},
                                                                      status=503))
        async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as session:
            url = str(server.make_url("")).rstrip("/")
            router, _, metrics = make_router(session, [url], [url], queue_timeout_s=1)
            return await router.route(BODY, HEADERS), metrics
    answer, metrics = asyncio.run(main())
    assert answer.status == 503 and json.loads(answer.body) == {"message": "full"}
    assert metrics.retries.labels(reason="503")._value.get() == 0


@contextlib.contextmanager
def unanswered_port():
    """A loopback port whose accept queue is full: a new connection's SYN is dropped, as by a
    vanished pod's IP, so connecting hangs."""
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.socket())
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        for _ in range(3):
            filler = stack.enter_context(socket.socket())
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
        yield f"http://127.0.0.1:{port}"


def test_a_connection_that_never_opens_moves_on_to_another_worker(monkeypatch):
    monkeypatch.setattr(proxy, "CONNECT_TIMEOUT_S", 0.3)

    async def main(vanished):
        app = web.Application()
        app.router.add_post("/v1/score", lambda _: web.json_response({"scores": []}))
        async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as session:
            url = str(server.make_url("")).rstrip("/")
            router, _, metrics = make_router(session, [vanished, url], [vanished, url], 1)
            # round robin: whichever URL sorts first, one of the two requests meets `vanished`;
            # before the fix it waited the whole request timeout (120 s) and answered 504
            codes = [(await asyncio.wait_for(router.route(BODY, HEADERS), 10)).status
                     for _ in range(2)]
            return codes, metrics
    with unanswered_port() as vanished:
        codes, metrics = asyncio.run(main(vanished))
    assert codes == [200, 200]
    assert metrics.retries.labels(reason="connect-timeout")._value.get() == 1


def test_a_malformed_answer_is_a_counted_502():
    async def garbage(reader, writer):
        await reader.read(1024)
        writer.write(b"HTTP/1.1 not-a-status\r\n\r\n")
        await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(garbage, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        async with server, aiohttp.ClientSession() as session:
            router, _, _ = make_router(session, [url], [url], queue_timeout_s=1)
            return await router.route(BODY, HEADERS)  # before the fix: the ClientError escaped
    answer = asyncio.run(main())
    assert answer.status == 502 and b"answered unreadably" in answer.body


def test_requests_in_flight_are_counted_until_answered_or_failed():
    # cache_aware weighs workers by them: a request counts from its send until its answer, and a
    # failed connection (here: refused) leaves nothing behind.
    release = asyncio.Event()

    async def slow(request):
        await release.wait()
        return web.json_response({"scores": []})

    async def main():
        app = web.Application()
        app.router.add_post("/v1/score", slow)
        async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as session:
            url = str(server.make_url("")).rstrip("/")
            router, _, _ = make_router(session, [url, REFUSING], [url, REFUSING], queue_timeout_s=1)
            pending = [asyncio.create_task(router.route(BODY, HEADERS)) for _ in range(3)]
            await asyncio.sleep(0.3)
            def counts():
                return {url: router.registry.get(url).requests_in_flight for url in (url, REFUSING)}
            during = counts()
            release.set()
            statuses = [answer.status for answer in await asyncio.gather(*pending)]
            return during, counts(), statuses
    during, after, statuses = asyncio.run(main())
    assert statuses == [200, 200, 200]  # those sent to REFUSING moved on to the live worker
    assert sorted(during.values()) == [0, 3] and set(after.values()) == {0}
