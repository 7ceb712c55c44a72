"""A fleet in-process over real HTTP on loopback (workers faked at the network boundary: aiohttp
servers answering /get_load, /v1/models and /v1/score): its poller learns each worker's models,
the fleet owns their names, and a request that names an adapter goes to the workers that list it
(vLLM's /v1/models shape: an adapter is an entry with a `parent`), any worker when none does; a
worker is asked its models until it answers, once."""
from __future__ import annotations

import asyncio
import json
from collections import Counter

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.config import FleetSource, GatewayConfig
from gateway.fleets import Fleets, build_fleet
from gateway.metrics import GatewayMetrics
from gateway.served import requested_model
from tests.gateway.support import score_body

HEADERS = {"content-type": "application/json"}


def fake_worker(models: list[dict], scored: Counter, name: str) -> web.Application:
    async def score(_: web.Request) -> web.Response:
        scored[name] += 1
        return web.json_response({"scores": [[0.5, 0.5]] * 2, "usage": {"prompt_tokens": 7}})
    app = web.Application()
    app.router.add_get("/get_load", lambda _: web.json_response([{"num_reqs": 0}]))
    app.router.add_get("/v1/models", lambda _: web.json_response({"object": "list", "data": models}))
    app.router.add_post("/v1/score", score)
    return app


BASE = {"id": "base", "object": "model", "parent": None}
SQL = {"id": "sql", "object": "model", "parent": "base"}


async def route_all(models_of: dict[str, list[dict]], asked: list[str]) -> tuple[Counter, Fleets]:
    """A fleet `f` over one fake worker per entry of models_of; each of `asked` (a model name)
    routed as the app routes it; returns the requests each worker scored, and the fleets."""
    scored: Counter = Counter()
    servers = {name: TestServer(fake_worker(models, scored, name)) for name, models in models_of.items()}
    for server in servers.values():
        await server.start_server()
    urls = {str(server.make_url("")).rstrip("/"): name for name, server in servers.items()}
    config = GatewayConfig(fleet=(f"f={','.join(urls)}",), load_interval_s=0.02)
    async with aiohttp.ClientSession() as session:
        fleet = build_fleet(FleetSource("f", tuple(urls)), config, session, GatewayMetrics())
        fleets = Fleets([fleet])
        fleet.set_rotation(urls)
        try:
            for _ in range(200):  # every worker polled and its models asked (bounded: 4 s)
                if all(w.models is not None for w in fleet.registry.all()):
                    break
                await asyncio.sleep(0.02)
            for model in asked:
                body = score_body(model=model)
                found, route = fleets.route(requested_model({}, body))
                answer = await found.router.route(json.dumps(body).encode(), HEADERS, adapter=route.adapter)
                assert answer.status == 200, answer.body
            fleet.set_rotation([])  # scaled to zero: the fleet keeps its names
        finally:
            await fleet.poller.stop()
            for server in servers.values():
                await server.close()
    return scored, fleets


def test_a_request_for_an_adapter_goes_to_the_workers_that_list_it():
    scored, fleets = asyncio.run(route_all({"plain": [BASE], "with-sql": [BASE, SQL]},
                                           ["base:sql"] * 6 + ["sql"] * 6 + ["base"] * 20))
    assert scored["with-sql"] >= 12 and scored["plain"] > 0  # the base model's go anywhere
    assert scored["plain"] + scored["with-sql"] == 32
    (fleet,) = list(fleets)
    assert fleet.names.names() == ("base", "sql") and fleet.names.adapters == {"sql"}  # with no worker left
    assert fleets.route("base:sql")[1].adapter == "sql"


def test_an_adapter_no_worker_lists_goes_to_any_worker_of_its_fleet():
    scored, _ = asyncio.run(route_all({"one": [BASE], "two": [BASE]}, ["base:other"] * 20))
    assert scored["one"] > 0 and scored["two"] > 0 and scored.total() == 20


def test_a_worker_without_a_models_list_is_asked_once_and_one_that_is_loading_again():
    asked: Counter = Counter()
    answers = {"none": [404], "loading": [503, 503, 200]}  # then the last one, again and again

    def models(name):
        async def handler(_: web.Request) -> web.Response:
            asked[name] += 1
            status = answers[name][min(asked[name], len(answers[name])) - 1]
            return web.json_response({"object": "list", "data": [BASE]} if status == 200 else {}, status=status)
        return handler

    async def main():
        servers = {}
        for name in answers:
            app = web.Application()
            app.router.add_get("/get_load", lambda _: web.json_response([{"num_reqs": 0}]))
            app.router.add_get("/v1/models", models(name))
            servers[name] = TestServer(app)
            await servers[name].start_server()
        urls = {name: str(server.make_url("")).rstrip("/") for name, server in servers.items()}
        config = GatewayConfig(fleet=(f"f={','.join(urls.values())}",), load_interval_s=0.02)
        async with aiohttp.ClientSession() as session:
            fleet = build_fleet(FleetSource("f", tuple(urls.values())), config, session, GatewayMetrics())
            fleet.set_rotation(urls.values())
            await asyncio.sleep(0.5)  # ~25 polls of each
            await fleet.poller.stop()
            found = {name: fleet.registry.get(url).models for name, url in urls.items()}
        for server in servers.values():
            await server.close()
        return found, fleet.names.names()

    found, names = asyncio.run(main())
    assert found == {"none": frozenset(), "loading": frozenset({"base"})} and names == ("base",)
    assert asked == {"none": 1, "loading": 3}  # never again once answered
