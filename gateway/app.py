"""create_app(config): the gateway's HTTP surface (aiohttp.web) and what it starts and stops.

Routes: POST /v1/score (through the Router), /health (process up), /ready and /health_generate
(at least one worker known), /metrics. Startup builds the upstream session, the registry, the
poller and discovery (static URLs or the pod watch); cleanup stops them in reverse.
"""
from __future__ import annotations

import asyncio
import json
import secrets
import time

import aiohttp
from aiohttp import web

from fleet_operator.names import FLEET_LABEL  # the API's names: a module of constants only
from gateway.config import GatewayConfig
from gateway.kube_watch import PodWatch
from gateway.metrics import CONTENT_TYPE, GatewayMetrics
from gateway.poller import Poller
from gateway.routing import Router, error_reply
from gateway.transitions import TransitionLog
from gateway.waiting import WaitingRoom
from gateway.workers import WorkerRegistry

ROUTER = web.AppKey("router", Router)


def create_app(config: GatewayConfig) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.cleanup_ctx.append(lambda app: _lifetime(app, config))

    async def score(request: web.Request) -> web.Response:
        started_s = time.monotonic()
        if not _authorized(config, request):
            reply = error_reply(401, "AuthenticationError",
                                "missing or wrong API key: send 'Authorization: Bearer <key>'")
        else:
            reply = await request.app[ROUTER].route(await request.read(), request.headers)
        request.app[ROUTER].metrics.observe_answer(reply.status, time.monotonic() - started_s)
        return web.Response(status=reply.status, body=reply.body, headers=reply.headers)

    async def health(_: web.Request) -> web.Response:
        return web.Response(status=200)

    async def ready(request: web.Request) -> web.Response:
        if request.app[ROUTER].registry.urls():
            return web.Response(status=200)
        reply = error_reply(503, "ServiceUnavailableError", "not ready: no worker known")
        return web.Response(status=503, body=reply.body, headers=reply.headers)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=request.app[ROUTER].metrics.render(),
                            headers={"Content-Type": CONTENT_TYPE})

    app.add_routes([web.post("/v1/score", score), web.get("/health", health),
                    web.get("/ready", ready), web.get("/health_generate", ready),
                    web.get("/metrics", metrics)])
    return app


def _authorized(config: GatewayConfig, request: web.Request) -> bool:
    if config.api_key is None:
        return True
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(
        token.strip().encode(), config.api_key.encode())


async def _lifetime(app: web.Application, config: GatewayConfig):
    connector = aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True)
    session = aiohttp.ClientSession(connector=connector, json_serialize=json.dumps)
    registry = WorkerRegistry(config.stale_after_s, on_change=TransitionLog().observe)
    waiting = WaitingRoom(config.max_waiting_requests)
    poller = Poller(registry, session, config.load_interval_s, config.poll_timeout_s, waiting.notify)
    app[ROUTER] = Router(config, registry, waiting, GatewayMetrics(waiting, registry), session)

    def set_rotation(urls) -> None:
        registry.set_urls(urls)
        poller.sync()
        waiting.notify()

    watch = None
    if config.fleet:
        watch = PodWatch(config.fleet, config.namespace, FLEET_LABEL, set_rotation,
                         asyncio.get_running_loop())
        watch.start()
    else:
        set_rotation(config.worker_urls)
    yield
    if watch is not None:
        watch.stop()
    await poller.stop()
    await session.close()
