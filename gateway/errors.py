"""The gateway's own answers: errors in the server's body, marked as the gateway's, and the one
middleware that makes every answer (aiohttp's 404/405 included) such a body and counts it.

A worker's answer passes through unchanged (its `param` is null); one the gateway made itself says
`"param": "gateway"`, so a client can tell which tier refused it. Nothing here routes or polls.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

from aiohttp import web

from gateway.proxy import Upstream
from scoringfleet_contract.facts import METRICS_PATH, PROBE_PATHS, error_body as contract_error_body

log = logging.getLogger(__name__)

JSON = "application/json"
TIER = "gateway"  # the error body's `param` when the gateway, not a worker, answered
# nginx's status for a client that closed its connection before it was answered: no client reads
# it, but the request is counted (not as a gateway 500, and with no traceback).
CLIENT_CLOSED = 499
# The gateway's own surface: probes and scrapes are not client requests and are not counted.
UNCOUNTED_PATHS = PROBE_PATHS | {METRICS_PATH}
ROUTES = ("POST /v1/score, /v1/rerank, /v2/rerank, /rerank, /score, /classify, /v1/classify; "
          "GET /health, /ready, /health_generate, /metrics, /v1/models, /get_server_info")


class Refusal(Exception):
    """A request the gateway refuses at the door (status, message), before any worker sees it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def error_body(status: int, message: str) -> bytes:
    """SGLang's error body, `param` naming the gateway, its type the one for `status`."""
    return json.dumps(contract_error_body(status, message, param=TIER)).encode()


def error_reply(status: int, message: str, retry_after_s: int | None = None) -> Upstream:
    """An answer the gateway itself decided."""
    headers = {"content-type": JSON}
    if retry_after_s is not None:
        headers["retry-after"] = str(retry_after_s)
    return Upstream(status, headers, error_body(status, message))


def as_response(reply: Upstream) -> web.Response:
    return web.Response(status=reply.status, body=reply.body, headers=reply.headers)


def is_counted(request: web.BaseRequest) -> bool:
    """Client requests are counted; GETs of the probes and /metrics are not."""
    return not (request.path in UNCOUNTED_PATHS and request.method in ("GET", "HEAD"))


def error_middleware(count: Callable[[int, float, str], None]):
    """aiohttp middleware: every error leaves as the gateway's JSON body (an HTTPException that
    aiohttp raised, a Refusal, anything unexpected: 500, logged), and every counted answer goes
    to count(status, seconds since the request's head arrived, the model it resolved to: the
    request's "model" entry, "" if none)."""
    @web.middleware
    async def middleware(request: web.Request, handler) -> web.StreamResponse:
        started_s = time.monotonic()
        try:
            response = await handler(request)
        except Refusal as refusal:
            response = as_response(error_reply(refusal.status, refusal.message))
        except web.HTTPException as error:
            if error.status < 400:
                raise  # a redirect or the like: not an error
            message = f"{error.reason}: {request.method} {request.path}"
            if error.status in (404, 405):
                message += f" (the gateway serves {ROUTES})"
            response = as_response(error_reply(error.status, message))
            for name in ("Allow", "Retry-After"):  # 405 says what is allowed
                if name in error.headers:
                    response.headers[name] = error.headers[name]
        except Exception as error:  # noqa: BLE001 - the client gets a 500, the log the cause
            log.exception("unexpected error on %s %s", request.method, request.path)
            response = as_response(error_reply(500, f"{type(error).__name__}: {error}"))
        except asyncio.CancelledError:  # the client hung up (connections.serve cancels then)
            if is_counted(request):
                count(CLIENT_CLOSED, time.monotonic() - started_s, request.get("model", ""))
            raise
        if is_counted(request):
            count(response.status, time.monotonic() - started_s, request.get("model", ""))
        return response
    return middleware
