"""How connections are served: uvicorn's settings for this server, and an HTTP/1.1 protocol that
closes a connection whose request head (request line and headers) is not complete in time.

uvicorn arms its keep-alive timer only after a response and stops it at the first byte, so a
client that connects and sends half a head (or nothing) held a file descriptor forever (3,000 such
connections stayed open 25 s+). The one seam is uvicorn's documented `http=` protocol class; h11
says when a head is complete.
"""
from __future__ import annotations

import asyncio
import functools

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from scoringfleet_contract.facts import SERVER_SHUTDOWN_S
from server.access_log import uvicorn_log_config
from server.config import ServerConfig


class HeadTimeoutProtocol(H11Protocol):
    """Closes the connection when a request head is not complete `head_timeout_s` after the
    connection opened, or, on a kept-alive connection, after the first bytes of its next head
    arrived. An idle kept-alive connection (no bytes yet) is left to uvicorn's keep-alive timeout,
    which stops at the first byte: that is where this timer takes over."""

    def __init__(self, *args, head_timeout_s: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.head_timeout_s = head_timeout_s
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # a whole head arrived
            self._disarm_head_timer()
        elif self._head_timer is None:  # the first bytes of a kept-alive connection's next head
            self._arm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        pipelined = bool(self.conn.trailing_data[0])  # bytes of the next head came with the last
        if pipelined and self.conn.their_state is h11.IDLE:
            self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        if self.transport.is_closing():
            return
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._on_head_timeout)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _on_head_timeout(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def uvicorn_config(app, config: ServerConfig, log_level: str = "info") -> uvicorn.Config:
    """uvicorn's settings for `app`: the head-timeout protocol, a bounded graceful shutdown, and
    an access log without the probes', polls' and scrapes' lines (unless access_log_all)."""
    protocol = functools.partial(HeadTimeoutProtocol, head_timeout_s=config.header_timeout_s)
    return uvicorn.Config(app, host=config.host, port=config.port, log_level=log_level,
                          http=protocol, timeout_graceful_shutdown=SERVER_SHUTDOWN_S,
                          log_config=uvicorn_log_config(config.access_log_all))
