"""create_app(config): the gateway's HTTP surface (aiohttp.web) and what it starts and stops.

Routes: POST /v1/score, /v1/rerank, /v2/rerank, /rerank, /score, /classify and /v1/classify (the
door's checks, then the Router), /health
(process up), /ready and /health_generate (at least one usable worker), /metrics, /v1/models and
/get_server_info (a ready worker's answer, model_info.py). A scoring request goes to the fleet that
serves its model (fleets.Fleets.route: the `x-gateway-model-name` header, else the body's `model`),
a model no fleet serves is a 404 naming the served ones. Every error is the gateway's JSON body
and every client answer is counted, by the model it resolved to (errors.error_middleware). Startup
builds the upstream session and each fleet (fleets.build_fleet) with its discovery (static URLs or
the pod watch); cleanup stops them in reverse.
"""
from __future__ import annotations

import asyncio
import json
import time

import aiohttp
from aiohttp import web

from gateway.affinity import query_key
from gateway.config import GatewayConfig
from gateway.errors import Refusal, as_response, error_middleware, error_reply
from gateway.fleets import Fleets, build_fleet
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
from gateway.model_info import ask_a_worker, list_models
from gateway.served import requested_model
from gateway.tokens import shape_of
from gateway.workers import WorkerRegistry, WorkerState
from scoringfleet_contract.facts import (
    FLEET_LABEL,
    HEALTH_GENERATE_PATH,
    HEALTH_PATH,
    METRICS_PATH,
    MODELS_PATH,
    READY_PATH,
    SCORING_PATHS,
    SERVER_INFO_PATH,
    UNAUTHORIZED_MESSAGE,
)

FLEETS = web.AppKey("fleets", Fleets)
SESSION = web.AppKey("session", aiohttp.ClientSession)
METRICS = web.AppKey("metrics", GatewayMetrics)
MODEL = "model"  # the request's key for the served name it resolved to (the metrics' label)


def create_app(config: GatewayConfig) -> web.Application:
    app = web.Application(middlewares=[error_middleware(lambda status, s, model: count_answer(app, status, s, model))])
    app.cleanup_ctx.append(lambda app: _lifetime(app, config))

    async def score(request: web.Request) -> web.Response:
        if not is_authorized(request.headers, config.api_key):
            raise Refusal(401, UNAUTHORIZED_MESSAGE)
        check_head(request.headers, config.max_request_bytes)
        body = decode_body(await read_body(request.content, config.max_request_bytes),
                           content_encoding(request.headers), config.max_request_bytes)
        payload = parse_body(body)
        model = requested_model(request.headers, payload)
        found = request.app[FLEETS].route(model)
        if found is None:
            raise Refusal(404, request.app[FLEETS].unknown(model))
        fleet, route = found
        request[MODEL] = route.label
        reply = await fleet.router.route(
            body, upstream_headers(request.headers, config.api_key), count_sequences(payload),
            request.path, query_key(payload), shape_of(payload), route.adapter)
        return as_response(reply)

    async def health(_: web.Request) -> web.Response:
        return web.Response(status=200)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=request.app[METRICS].render(), headers={"Content-Type": CONTENT_TYPE})

    # A rerank is a score request on the worker (its documents the items), and the other engines'
    # shapes (TEI's /rerank, vLLM's /score and /classify, SGLang's /v1/classify) the same: one door, one router.
    app.add_routes([web.post(path, score) for path in SCORING_PATHS])
    app.add_routes([web.get(HEALTH_PATH, health),
                    web.get(READY_PATH, ready), web.get(HEALTH_GENERATE_PATH, ready),
                    web.get(METRICS_PATH, metrics),
                    *(web.get(path, model_info(config)) for path in (MODELS_PATH, SERVER_INFO_PATH))])
    return app


async def ready(request: web.Request) -> web.Response:
    """/ready and /health_generate: 200 while some fleet has a usable worker, else 503 with why."""
    fleets = list(request.app[FLEETS])
    if any(fleet.registry.fresh(time.monotonic()) for fleet in fleets):
        return web.Response(status=200)
    reasons = [unready_reason(fleet.registry) for fleet in fleets]
    if len(fleets) > 1:
        reasons = [f"{fleet.name}: {reason}" for fleet, reason in zip(fleets, reasons, strict=True)]
    return as_response(error_reply(503, f"not ready: {'; '.join(reasons)}"))


def model_info(config: GatewayConfig):
    """The handler of GET /v1/models (every fleet's models, model_info.list_models) and
    /get_server_info (the first fleet with a ready worker: the server's arguments are per fleet)."""
    started = int(time.time())  # /v1/models' `created` for a model no ready worker listed

    async def handler(request: web.Request) -> web.Response:
        fleets, session = request.app[FLEETS], request.app[SESSION]
        headers = upstream_headers(request.headers, config.api_key)
        if request.path == MODELS_PATH:
            return as_response(await list_models([(fleet.registry, fleet.names) for fleet in fleets], session,
                                                 headers, config.poll_timeout_s, started))
        now = time.monotonic()
        fleet = next((fleet for fleet in fleets if fleet.registry.fresh(now)), fleets.first())
        return as_response(await ask_a_worker(fleet.registry, session, request.path, headers,
                                              config.poll_timeout_s))

    return handler


def count_answer(app: web.Application, status: int, duration_s: float = 0.0, model: str = "") -> None:
    """One answer to a client, by status and model, after `duration_s` (also those made before the
    fleets exist; a connection refused at the cap has no request and takes 0)."""
    if METRICS in app:
        app[METRICS].observe_answer(status, duration_s, model)


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
    app[SESSION], app[METRICS] = session, GatewayMetrics()
    app[FLEETS] = Fleets([build_fleet(source, config, session, app[METRICS]) for source in config.fleets])
    watches = []
    for fleet in app[FLEETS]:
        if fleet.source.urls is None:  # discovered: its ready pods, watched
            watches.append(PodWatch(fleet.name, config.namespace, FLEET_LABEL, fleet.set_rotation,
                                    asyncio.get_running_loop()))
            watches[-1].start()
        else:
            fleet.set_rotation(fleet.source.urls)
    yield
    for watch in watches:
        watch.stop()
    for fleet in app[FLEETS]:
        await fleet.poller.stop()
    await session.close()
