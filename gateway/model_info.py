"""GET /v1/models and /get_server_info through the gateway: asked of a ready worker and answered
as it answered, so that a client that discovers the model through the fleet's address (OpenAI
clients list /v1/models; SGLang's tools read /get_server_info) finds the served model.

Fresh workers (ready, or draining and still answering) are asked least loaded first, each
within the poll timeout, until one answers 200; with none (all loading, or none known) the answer
is the gateway's 503. Owns nothing.
"""
from __future__ import annotations

import time

import aiohttp

from gateway.errors import JSON, error_reply
from gateway.proxy import Upstream
from gateway.transitions import describe_error
from gateway.workers import WorkerRegistry

INFO_PATHS = ("/v1/models", "/get_server_info")
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
