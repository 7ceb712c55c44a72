"""`python -m gateway` under hostile clients, over a real server: what the gateway refuses itself
(JSON in the server's error shape with `"param": "gateway"`, counted by code, no worker bothered),
half-open heads closed within --header-timeout while requests keep being served, and connections
beyond --max-connections refused with a 503."""
from __future__ import annotations

import gzip
import json
import socket
import time
import zlib

import httpx
import pytest

from tests.gateway.support import gateway_process, sample, score_body
from tests.kit.runners import FakeRunner
from tests.kit.servers import serving
from tests.kit.waiting import wait_for
from tests.server.test_connections import HALF_HEAD, HEALTH, read_response, wait_all_closed

G = "scoringfleet_gateway"
HEADER_TIMEOUT_S = 2.0
JSON_HEADERS = {"content-type": "application/json"}
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """One real server (free runner) behind a gateway with its default limits but a short head
    timeout; yields (gateway URL, worker URL)."""
    log_path = tmp_path_factory.mktemp("gateway") / "gateway.log"
    with serving(FakeRunner()) as (worker, _), \
            gateway_process("--worker-urls", worker, "--header-timeout", str(HEADER_TIMEOUT_S),
                            log_path=log_path) as gateway:
        wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 1)
        yield gateway, worker


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=5)


def is_gateway_error(response: httpx.Response, status: int) -> bool:
    body = response.json()
    return (response.status_code == status and response.headers["content-type"].startswith(
        "application/json") and body["object"] == "error" and body["code"] == status
        and body["param"] == "gateway" and body["type"] and body["message"])


BODY = json.dumps(score_body()).encode()
HOSTILE = {  # id: (body, extra headers, the gateway's status, what its message says)
    "50000-deep": (b"[" * 50_000 + b"]" * 50_000, {}, 400, "nested too deeply"),
    "not-json": (b'{"query": [1, 2', {}, 400, "malformed JSON"),
    "not-utf8": (b"\xff\xfe\xfa", {}, 400, "malformed JSON"),
    "junk-gzip": (b"this is not gzip", {"content-encoding": "gzip"}, 400, "bad compression"),
    "truncated-gzip": (gzip.compress(BODY)[:-8], {"content-encoding": "gzip"}, 400, "truncated"),
    "gzip-bomb": (gzip.compress(b" " * (64 * MIB)), {"content-encoding": "gzip"}, 413, "decoded"),
    "brotli": (b"\x0b\x02\x80{}\x03", {"content-encoding": "br"}, 415, "uncompressed"),
    "9-MiB": (b" " * (9 * MIB), {}, 413, f"{8 * MIB} bytes"),
    "9-MiB-chunked": (lambda: iter([b" " * MIB] * 9), {}, 413, f"{8 * MIB} bytes"),  # no length
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_bodies_get_the_gateways_json_4xx_and_no_worker_sees_them(fleet, name):
    gateway, worker = fleet
    content, headers, status, says = HOSTILE[name]
    content = content() if callable(content) else content  # a fresh stream for each run
    routed, counted = (sample(gateway, f"{G}_routed_total", worker=worker),
                       sample(gateway, f"{G}_requests_total", code=str(status)))
    response = httpx.post(f"{gateway}/v1/score", content=content,
                          headers={**JSON_HEADERS, **headers}, timeout=30)
    assert is_gateway_error(response, status), response.text
    assert says in response.json()["message"]
    assert sample(gateway, f"{G}_routed_total", worker=worker) == routed  # refused at the door
    assert sample(gateway, f"{G}_requests_total", code=str(status)) == counted + 1
    assert httpx.post(f"{gateway}/v1/score", json=score_body()).status_code == 200


@pytest.mark.parametrize("encoding, compress", [("gzip", gzip.compress),
                                                ("deflate", zlib.compress)])
def test_a_valid_compressed_body_is_decoded_and_passed_on_plain(fleet, encoding, compress):
    gateway, worker = fleet
    direct = httpx.post(f"{worker}/v1/score", content=compress(BODY),
                        headers={**JSON_HEADERS, "content-encoding": encoding})
    assert direct.status_code == 415  # the server decodes nothing
    through = httpx.post(f"{gateway}/v1/score", content=compress(BODY),
                         headers={**JSON_HEADERS, "content-encoding": encoding})
    assert through.status_code == 200 and len(through.json()["scores"]) == 2


def test_a_body_at_the_limit_passes_the_door(fleet):
    gateway, _ = fleet
    body = BODY[:-1] + b" " * (8 * MIB - len(BODY)) + b"}"
    assert len(body) == 8 * MIB
    assert httpx.post(f"{gateway}/v1/score", content=body, headers=JSON_HEADERS,
                      timeout=30).status_code == 200


@pytest.mark.parametrize("method, path, status", [
    ("GET", "/nowhere", 404), ("POST", "/v1/generate", 404), ("GET", "/v1/score", 405),
], ids=["unknown-get", "unknown-post", "wrong-method"])
def test_unknown_paths_and_methods_are_json_and_counted(fleet, method, path, status):
    gateway, _ = fleet
    before = sample(gateway, f"{G}_requests_total", code=str(status))
    response = httpx.request(method, f"{gateway}{path}")
    assert is_gateway_error(response, status), response.text
    assert f"{method} {path}" in response.json()["message"]
    assert "POST /v1/score" in response.json()["message"]  # what it does serve
    assert sample(gateway, f"{G}_requests_total", code=str(status)) == before + 1
    if status == 405:
        assert "POST" in response.headers["allow"]


def test_a_client_that_hangs_up_mid_body_is_counted_as_499_not_as_a_gateway_500(fleet):
    gateway, _ = fleet
    before_499 = sample(gateway, f"{G}_requests_total", code="499")
    before_500 = sample(gateway, f"{G}_requests_total", code="500")
    timed_499 = sample(gateway, f"{G}_request_duration_seconds_count", code="499")
    with connect(gateway) as client:
        client.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 1000\r\n\r\n{\"items\": ")
        time.sleep(0.2)  # the gateway is reading the body when the client leaves
    wait_for(lambda: sample(gateway, f"{G}_requests_total", code="499") == before_499 + 1)
    assert sample(gateway, f"{G}_requests_total", code="500") == before_500
    assert sample(gateway, f"{G}_request_duration_seconds_count", code="499") == timed_499 + 1


def test_clients_that_hang_up_while_waiting_leave_the_waiting_room_counted_as_499(tmp_path):
    # No worker is ever ready: each request waits (up to the 300 s queue timeout). A client that
    # gives up must free its place and stop counting as demand (the wake from zero reads it).
    with gateway_process("--worker-urls", "http://127.0.0.1:9", "--queue-timeout", "300",
                         log_path=tmp_path / "gateway.log") as gateway:
        clients = [connect(gateway) for _ in range(3)]
        for client in clients:
            client.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                           b"\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
        wait_for(lambda: sample(gateway, f"{G}_waiting_requests") == 3)
        for client in clients:
            client.close()
        wait_for(lambda: sample(gateway, f"{G}_waiting_requests") == 0)
        assert sample(gateway, f"{G}_requests_total", code="499") == 3
        assert sample(gateway, f"{G}_request_duration_seconds_count", code="499") == 3
        assert sample(gateway, f"{G}_requests_total", code="500") == 0


def test_probes_and_scrapes_are_not_counted_as_requests(fleet):
    gateway, _ = fleet
    before = sample(gateway, f"{G}_requests_total", code="200")
    for path in ("/health", "/ready", "/health_generate", "/metrics"):
        assert httpx.get(f"{gateway}{path}").status_code == 200, path
    assert sample(gateway, f"{G}_requests_total", code="200") == before


def test_100_half_open_heads_are_closed_while_requests_keep_being_served(fleet):
    gateway, _ = fleet
    silent = [connect(gateway) for _ in range(50)]
    half = [connect(gateway) for _ in range(50)]
    for sock in half:
        sock.sendall(HALF_HEAD)
    opened_s = time.monotonic()
    try:
        with httpx.Client(base_url=gateway, timeout=5) as client:
            answers = [client.post("/v1/score", json=score_body()).status_code for _ in range(20)]
        assert answers == [200] * 20
        still_open = wait_all_closed(silent + half, timeout_s=10 - (time.monotonic() - opened_s))
        closed_after_s = time.monotonic() - opened_s
        print(f"\n100 half-open connections closed {closed_after_s:.2f} s after opening "
              f"(--header-timeout {HEADER_TIMEOUT_S} s)")
        assert still_open == []
        assert httpx.post(f"{gateway}/v1/score", json=score_body()).status_code == 200
    finally:
        for sock in silent + half:
            sock.close()


def test_a_head_in_pieces_is_served_and_half_a_head_after_an_answer_is_closed(fleet):
    gateway, _ = fleet
    with connect(gateway) as sock:
        sock.sendall(HEALTH[:10])
        time.sleep(HEADER_TIMEOUT_S / 4)  # slow, not stalled
        sock.sendall(HEALTH[10:])
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        sock.sendall(HALF_HEAD)
        assert wait_all_closed([sock], timeout_s=HEADER_TIMEOUT_S + 5) == []


def test_connections_beyond_the_cap_get_a_503_and_the_gateway_recovers(tmp_path):
    with serving(FakeRunner()) as (worker, _), \
            gateway_process("--worker-urls", worker, "--max-connections", "8",
                            log_path=tmp_path / "gateway.log") as gateway:
        wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 1)
        held = [connect(gateway) for _ in range(8)]
        try:
            wait_for(lambda: httpx.get(f"{gateway}/health").status_code == 503, timeout_s=5)
            refused = httpx.post(f"{gateway}/v1/score", json=score_body())
            assert is_gateway_error(refused, 503) and refused.headers["retry-after"] == "1"
            assert "8 open connections" in refused.json()["message"]
        finally:
            for sock in held:
                sock.close()
        wait_for(lambda: httpx.post(f"{gateway}/v1/score", json=score_body()).status_code == 200,
                   timeout_s=5)
        assert sample(gateway, f"{G}_requests_total", code="503") >= 2
