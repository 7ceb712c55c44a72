"""create_app(config): the gateway's HTTP surface (aiohttp.web) and what it starts and stops.

Routes: POST /v1/score, /v1/rerank, /v2/rerank, /rerank, /score, /classify and /v1/classify (the
door's checks, then the Router), /health
(process up), /ready and /health_generate (at least one usable worker), /metrics, /v1/models and
/get_server_info (a ready worker's answer, model_info.py). Every error is the gateway's JSON body
and every client answer is counted (errors.error_middleware). Startup builds the upstream session,
the registry, the poller and discovery (static URLs or the pod watch); cleanup stops them in
reverse.
"""
from __future__ import annotations

import asyncio
import json
import time

import aiohttp
from aiohttp import web

from fleet_operator.names import FLEET_LABEL  # the API's names: a module of constants only
from gateway.affinity import query_key
from gateway.config import GatewayConfig
from gateway.errors import Refusal, as_response, error_middleware, error_reply
from gateway.intake import (
    check_head,
    content_encoding,
    count_sequences,
    decode_body,
    is_authorized,
    parse_body,
    read_body,
    upstream_headers,
)
from gateway.kube_watch import PodWatch
from gateway.metrics import CONTENT_TYPE, GatewayMetrics
from gateway.model_info import INFO_PATHS, ask_a_worker
from gateway.poller import Poller
from gateway.routing import Router
from gateway.tokens import shape_of
from gateway.transitions import TransitionLog
from gateway.waiting import WaitingRoom
from gateway.workers import WorkerRegistry, WorkerState
from scoringfleet_contract.facts import UNAUTHORIZED_MESSAGE

ROUTER = web.AppKey("router", Router)
# The other engines' scoring paths a worker serves for a classifier (TEI's /rerank, vLLM's /score and
# /classify, SGLang's /v1/classify) go the same way as /v1/score.
SCORING_PATHS = ("/v1/score", "/v1/rerank", "/v2/rerank", "/rerank", "/score", "/classify", "/v1/classify")


def create_app(config: GatewayConfig) -> web.Application:
    app = web.Application(middlewares=[error_middleware(lambda status, s: count_answer(app, status, s))])
    app.cleanup_ctx.append(lambda app: _lifetime(app, config))

    async def score(request: web.Request) -> web.Response:
        if not is_authorized(request.headers, config.api_key):
            raise Refusal(401, UNAUTHORIZED_MESSAGE)
        check_head(request.headers, config.max_request_bytes)
        body = decode_body(await read_body(request.content, config.max_request_bytes),
                           content_encoding(request.headers), config.max_request_bytes)
        payload = parse_body(body)
        reply = await request.app[ROUTER].route(
            body, upstream_headers(request.headers, config.api_key), count_sequences(payload),
            request.path, query_key(payload), shape_of(payload))
        return as_response(reply)

    async def health(_: web.Request) -> web.Response:
        return web.Response(status=200)

    async def ready(request: web.Request) -> web.Response:
        registry = request.app[ROUTER].registry
        if registry.fresh(time.monotonic()):
            return web.Response(status=200)
        return as_response(error_reply(503, f"not ready: {unready_reason(registry)}"))

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=request.app[ROUTER].metrics.render(),
                            headers={"Content-Type": CONTENT_TYPE})

    async def model_info(request: web.Request) -> web.Response:
        router = request.app[ROUTER]
        return as_response(await ask_a_worker(router.registry, router.session, request.path,
                                              upstream_headers(request.headers, config.api_key),
                                              config.poll_timeout_s))

    # A rerank is a score request on the worker (its documents the items): the same door and router.
    app.add_routes([web.post(path, score) for path in SCORING_PATHS])
    app.add_routes([web.get("/health", health),
                    web.get("/ready", ready), web.get("/health_generate", ready),
                    web.get("/metrics", metrics),
                    *(web.get(path, model_info) for path in INFO_PATHS)])
    return app


def count_answer(app: web.Application, status: int, duration_s: float = 0.0) -> None:
    """One answer to a client, by status, after `duration_s` (also those made before the router
    exists; a connection refused at the cap has no request and takes 0)."""
    if ROUTER in app:
        app[ROUTER].metrics.observe_answer(status, duration_s)


def unready_reason(registry: WorkerRegistry) -> str:
    """Why no worker is usable, for /ready's body: the workers in rotation by state."""
    if not registry.urls():
        return "no worker known"
    counts = registry.counts_by_state(time.monotonic())
    parts = [f"{counts[state.value]} {what}" for state, what in UNREADY_STATES if counts[state.value]]
    return f"no usable worker ({', '.join(parts)})"


UNREADY_STATES = ((WorkerState.UNAUTHORIZED, "reject the gateway's API key"),
                  (WorkerState.LOADING, "loading their model"),
                  (WorkerState.STALE, "not answering /get_load lately"),
                  (WorkerState.JOINED, "waiting for a first /get_load answer or the key check"))


async def _lifetime(app: web.Application, config: GatewayConfig):
    connector = aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True)
    session = aiohttp.ClientSession(connector=connector, json_serialize=json.dumps)
    key_required = config.api_key is not None
    registry = WorkerRegistry(config.stale_after_s, key_required=key_required,
                              on_change=TransitionLog(config.stale_after_s, key_required).observe,
                              on_new_process=lambda url: app[ROUTER].forget_workers([url]))
    waiting = WaitingRoom(config.max_waiting_requests)
    poller = Poller(registry, session, config.load_interval_s, config.poll_timeout_s,
                    waiting.notify, config.api_key)
    app[ROUTER] = Router(config, registry, waiting, GatewayMetrics(waiting, registry), session)

    def set_rotation(urls) -> None:
        _, removed = registry.set_urls(urls)
        app[ROUTER].forget_workers(removed)
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
