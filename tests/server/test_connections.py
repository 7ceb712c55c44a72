"""Half-open connections, through real sockets against a live server: a connection whose request
head is not complete within --header-timeout is closed (silent ones, half a head, half a head after
a kept-alive response), while complete requests, even a head sent in pieces, are served, and an
idle kept-alive connection is left to uvicorn's keep-alive timeout."""
from __future__ import annotations

import selectors
import socket
import time

import httpx
import pytest
import uvicorn

from tests.kit.runners import FakeRunner
from tests.kit.servers import serving

HEADER_TIMEOUT_S = 1.0
NUM_SILENT = 50
NUM_HALF_HEADS = 50
HALF_HEAD = b"POST /v1/score HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
# Longer than the header timeout, shorter than uvicorn's keep-alive timeout (which the server keeps).
IDLE_S = 2 * HEADER_TIMEOUT_S
HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.fixture(scope="module")
def url():
    with serving(FakeRunner(), header_timeout_s=HEADER_TIMEOUT_S) as (base_url, _):
        yield base_url


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=5)


def wait_all_closed(sockets: list[socket.socket], timeout_s: float) -> list[socket.socket]:
    """Read each socket until the server closes it (EOF or reset); return those still open."""
    selector = selectors.DefaultSelector()
    for sock in sockets:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    open_ones = set(sockets)
    deadline = time.monotonic() + timeout_s
    while open_ones and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.1):
            try:
                closed = key.fileobj.recv(65536) == b""
            except ConnectionResetError:
                closed = True
            if closed:
                selector.unregister(key.fileobj)
                open_ones.discard(key.fileobj)
    selector.close()
    return list(open_ones)


def read_response(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_incomplete_heads_are_closed_and_the_server_keeps_serving(url):
    silent = [connect(url) for _ in range(NUM_SILENT)]
    half = [connect(url) for _ in range(NUM_HALF_HEADS)]
    for sock in half:
        sock.sendall(HALF_HEAD)
    opened_s = time.monotonic()
    assert httpx.get(f"{url}/health", timeout=5).status_code == 200  # others are still served
    try:
        still_open = wait_all_closed(silent + half, timeout_s=HEADER_TIMEOUT_S + 9)
        print(f"\n{NUM_SILENT + NUM_HALF_HEADS} half-open connections closed "
              f"{time.monotonic() - opened_s:.2f} s after opening (header timeout "
              f"{HEADER_TIMEOUT_S} s)")
        assert still_open == []
    finally:
        for sock in silent + half:
            sock.close()


def test_a_head_sent_in_pieces_within_the_timeout_is_served(url):
    with connect(url) as sock:
        sock.sendall(HEALTH[:10])
        time.sleep(HEADER_TIMEOUT_S / 4)  # the client is slow, not stalled
        sock.sendall(HEALTH[10:])
        assert read_response(sock).startswith(b"HTTP/1.1 200")


def test_half_a_head_after_a_kept_alive_response_is_closed(url):
    with connect(url) as sock:
        sock.sendall(HEALTH)
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        sock.sendall(HALF_HEAD)  # uvicorn's keep-alive timer stops at the first byte
        assert wait_all_closed([sock], timeout_s=HEADER_TIMEOUT_S + 9) == []


def test_an_idle_kept_alive_connection_outlives_the_header_timeout(url):
    assert HEADER_TIMEOUT_S < IDLE_S < uvicorn.Config(app=None).timeout_keep_alive
    with connect(url) as sock:
        sock.sendall(HEALTH)
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        time.sleep(IDLE_S)  # idle between requests: only uvicorn's keep-alive applies
        sock.sendall(HEALTH)
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        sock.sendall(HALF_HEAD)  # ...and half a head after that response is still timed
        started_s = time.monotonic()
        assert wait_all_closed([sock], timeout_s=HEADER_TIMEOUT_S + 9) == []
        assert time.monotonic() - started_s >= HEADER_TIMEOUT_S * 0.9
