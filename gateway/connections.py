"""How the gateway's connections are served: a listener whose protocol factory bounds the open
client connections, over aiohttp's request handler with a request-head timeout; serve() runs it
until SIGTERM or SIGINT.

The head timeout is aiohttp's keep-alive timeout: aiohttp (>= 3.14.4, pyproject's floor) arms it when a connection
opens and again after each answer, and closes a connection whose next request head is not
complete when it fires (an idle kept-alive one too, as uvicorn's 5 s keep-alive does). A handler
at work is never closed by it. A handler whose client hangs up is cancelled (errors.py counts it
as a 499). Beyond max_connections a new connection gets a 503 in the gateway's
error body and is closed: a flood of connections costs a file descriptor each only up to the cap.
"""
from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from gateway.errors import error_body
from scoringfleet_contract.facts import GATEWAY_SHUTDOWN_S

log = logging.getLogger(__name__)
REFUSED_LINGER_S = 1.0  # a refused connection waits this long for the client to close first


def refusal_bytes(max_connections: int) -> bytes:
    """The whole HTTP answer to a connection over the cap."""
    body = error_body(503, f"the gateway holds its maximum of {max_connections} open "
                           "connections; retry later")
    head = ("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Retry-After: 1\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


class RefusedConnection(asyncio.Protocol):
    """Answers 503 at once, stops writing, and closes when the client does (or after
    REFUSED_LINGER_S): closing with the client's request unread would reset the connection and
    could destroy the 503 before the client reads it."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer

    def connection_made(self, transport) -> None:
        transport.write(self.answer)
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(REFUSED_LINGER_S, transport.close)

    def data_received(self, data: bytes) -> None:
        pass  # the request is not read: it is refused whatever it says

    def eof_received(self) -> bool:
        return False  # the client is done too: close


def gated_factory(server: web.Server, max_connections: int,
                  on_refused: Callable[[], None]) -> Callable[[], asyncio.Protocol]:
    """aiohttp's protocol factory, or a RefusedConnection once max_connections are open.
    NOTE: connections count once connection_made ran, so a burst accepted in one event-loop turn
    may pass the cap by at most the listen backlog."""
    answer = refusal_bytes(max_connections)

    def factory() -> asyncio.Protocol:
        if len(server.connections) >= max_connections:
            on_refused()
            return RefusedConnection(answer)
        return server()
    return factory


async def serve(app: web.Application, host: str, port: int, header_timeout_s: float,
                max_connections: int, on_refused: Callable[[], None],
                access_log_class: type[AbstractAccessLogger]) -> None:
    """Serve `app` until SIGTERM or SIGINT, then stop listening, let requests in flight finish
    (at most GATEWAY_SHUTDOWN_S) and run the app's cleanup. Access lines go to `aiohttp.access`
    through `access_log_class` (access_log.py's choice of which requests write one)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(app, access_log=logging.getLogger("aiohttp.access"),
                           access_log_class=access_log_class, keepalive_timeout=header_timeout_s,
                           shutdown_timeout=GATEWAY_SHUTDOWN_S, auto_decompress=False,
                           # A client that hangs up cancels its handler: a request waiting for a
                           # worker leaves the waiting room (its place, the demand signal) and an
                           # upstream attempt is dropped, so the worker cancels it too.
                           handler_cancellation=True)
    await runner.setup()  # runs the app's startup: the router exists from here on
    factory = gated_factory(runner.server, max_connections, on_refused)
    listener = await loop.create_server(factory, host, port, reuse_address=True)
    log.info("gateway listening on %s:%d", host, port)
    try:
        await stop.wait()
    finally:
        listener.close()
        await runner.cleanup()
