"""GET /v1/models and /get_server_info through the gateway: asked of a ready worker and answered
as it answered, so that a client that discovers the model through the fleet's address (OpenAI
clients list /v1/models; SGLang's tools read /get_server_info) finds the served model.

Fresh workers (ready, or draining and still answering) are asked least loaded first, each
within the poll timeout, until one answers 200; with none (all loading, or none known) the answer
is the gateway's 503. /v1/models over several fleets: one list of every fleet's models (a ready
worker's entries, then an entry for each name its fleet serves that no worker listed: a fleet at
zero), no id twice; 503 only when no fleet has a name to list. Owns nothing.
"""
from __future__ import annotations

import json
import time
from collections.abc import Sequence

import aiohttp

from gateway.errors import JSON, error_reply
from gateway.proxy import Upstream
from gateway.served import ServedNames, parse_listing
from gateway.transitions import describe_error
from gateway.workers import WorkerRegistry
from scoringfleet_contract.facts import MODELS_PATH

MAX_WORKERS_ASKED = 3  # then the client hears why, rather than waiting on the whole fleet


async def ask_a_worker(registry: WorkerRegistry, session: aiohttp.ClientSession, path: str,
                       headers: dict[str, str], timeout_s: float) -> Upstream:
    """A ready worker's answer to GET `path`, or the gateway's 503 saying why there is none."""
    workers = sorted(registry.fresh(time.monotonic()), key=lambda worker: worker.load)
    if not workers:
        return error_reply(503, f"no ready worker to answer {path} (loading, or none known)",
                           retry_after_s=1)
    failures = []
    for worker in workers[:MAX_WORKERS_ASKED]:
        try:
            async with session.get(f"{worker.url}{path}", headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
                body = await response.read()
        except (TimeoutError, aiohttp.ClientError) as error:
            failures.append(f"{worker.url}: {describe_error(error)}")
            continue
        if response.status == 200:
            return Upstream(200, {"content-type": response.headers.get("content-type", JSON)}, body)
        failures.append(f"{worker.url}: HTTP {response.status}")
    return error_reply(503, f"no worker answered {path}: {'; '.join(failures)}", retry_after_s=1)


async def list_models(fleets: Sequence[tuple[WorkerRegistry, ServedNames]], session: aiohttp.ClientSession,
                      headers: dict[str, str], timeout_s: float, created: int) -> Upstream:
    """GET /v1/models over every fleet (in order): each fleet's ready worker's entries (its names
    learned from them), then its names no worker listed, as {id, object, created, owned_by}."""
    entries: dict[str, dict] = {}
    failure = None
    for registry, names in fleets:
        reply = await ask_a_worker(registry, session, MODELS_PATH, headers, timeout_s)
        try:
            payload = json.loads(reply.body) if reply.status == 200 else None
            names.learn(parse_listing(payload))
        except ValueError:  # not a list (an error, or another engine's shape): its names stand
            failure = failure or reply
        else:
            for entry in payload["data"]:
                entries.setdefault(entry["id"], entry)
        for name in names.names():
            entries.setdefault(name, {"id": name, "object": "model", "created": created,
                                      "owned_by": "scoring-fleet"})
    if not entries:
        return failure
    body = {"object": "list", "data": list(entries.values())}
    return Upstream(200, {"content-type": JSON}, json.dumps(body).encode())
