"""The SIGTERM drain of a real server process, through real HTTP: it keeps listening and telling
the truth while admitted work runs, answers new work 503 + Retry-After on kept-alive and new
connections alike, exits 0 once nothing is left; the drain timeout bounds it; a second signal
exits at once.

The server is tests/server/gated_server.py: `python -m server`'s serving path over a fake model
whose forward passes wait until the test closes the process's stdin, so admitted work lasts
exactly as long as the test needs (no sleeps).
"""
from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.server_process import free_port
from server.drain import DrainOutcome, drain_outcome
from tests.kit.servers import server_env, wait_ready
from tests.kit.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
NUM_ITEMS = 4
NUM_ADMITTED = 3
BODY = {"query": [1, 2, 3], "items": [[10 + i] for i in range(NUM_ITEMS)], "label_token_ids": [1, 2]}


@dataclass
class Gated:
    """A gated server process: its forwards are held until stdin closes."""

    process: subprocess.Popen
    url: str
    log_path: Path

    @property
    def log(self) -> str:
        return self.log_path.read_text()


def start_gated(log_path: Path, *flags: str) -> Gated:
    port = free_port()
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.server.gated_server", "--port", str(port), *flags],
            cwd=REPO, env=server_env(), stdin=subprocess.PIPE, stdout=log,
            stderr=subprocess.STDOUT)
    return Gated(process, f"http://127.0.0.1:{port}", log_path)


SERVER_FLAGS = {
    "story": ["--max-running-requests", "2", "--request-timeout", "30"],
    "drain-timeout": ["--drain-timeout", "1", "--request-timeout", "30"],
    "second-signal": ["--request-timeout", "30"],
}


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> dict[str, Gated]:
    """The module's three servers, started together (each pays one interpreter start)."""
    folder = tmp_path_factory.mktemp("drain")
    started = {name: start_gated(folder / f"{name}.log", *flags)
               for name, flags in SERVER_FLAGS.items()}
    try:
        for server in started.values():
            wait_ready(server.process, server.url)
        yield started
    finally:
        for server in started.values():
            if server.process.poll() is None:
                server.process.kill()
            server.process.wait(timeout=10)
            if not server.process.stdin.closed:
                server.process.stdin.close()


def admit(url: str, count: int) -> tuple[list[threading.Thread], list]:
    """Send `count` scoring requests from threads; each thread appends its response or error."""
    outcomes: list = []

    def send() -> None:
        try:
            outcomes.append(httpx.post(f"{url}/v1/score", json=BODY, timeout=60))
        except httpx.HTTPError as error:
            outcomes.append(error)
    threads = [threading.Thread(target=send) for _ in range(count)]
    for thread in threads:
        thread.start()
    wait_for(lambda: num_reqs(url) == count * NUM_ITEMS, timeout_s=20)
    return threads, outcomes


def num_reqs(url: str) -> int:
    return httpx.get(f"{url}/get_load", timeout=5).json()[0]["num_reqs"]


def wait_not_ready(url: str) -> None:
    wait_for(lambda: httpx.get(f"{url}/health_generate", timeout=5).status_code == 503,
               timeout_s=10, interval_s=0.02)


def gauges(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return {sample.name: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples}


@dataclass
class DrainStory:
    kept_alive: tuple[int, dict, dict]   # status, headers, body of /v1/score on a kept-alive conn
    new_connection: httpx.Response       # /v1/score on a new connection
    readiness: int
    liveness: int
    load: dict                           # /get_load while draining
    metrics: dict[str, float]            # /metrics while draining
    alive_while_work_left: bool
    admitted: list                       # what the admitted requests got
    return_code: int
    exit_after_release_s: float
    listening_after_exit: bool
    log: str


def get_status(connection: http.client.HTTPConnection, path: str) -> int:
    connection.request("GET", path)
    response = connection.getresponse()
    response.read()
    return response.status


def score_on(connection: http.client.HTTPConnection) -> tuple[int, dict, dict]:
    connection.request("POST", "/v1/score", json.dumps(BODY), {"content-type": "application/json"})
    response = connection.getresponse()
    return response.status, dict(response.getheaders()), json.loads(response.read())


def is_listening(url: str) -> bool:
    try:
        httpx.get(f"{url}/health", timeout=2)
        return True
    except httpx.ConnectError:
        return False


@pytest.fixture(scope="module")
def story(servers) -> DrainStory:
    process, url = servers["story"].process, servers["story"].url
    threads, admitted = admit(url, NUM_ADMITTED)
    kept = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]), timeout=10)
    assert get_status(kept, "/health_generate") == 200
    kept_socket = kept.sock
    process.send_signal(signal.SIGTERM)
    # Readiness polled over the kept-alive connection: it lives across the signal.
    wait_for(lambda: get_status(kept, "/health_generate") == 503, timeout_s=10, interval_s=0.02)
    assert kept.sock is kept_socket  # the next request really goes over the same connection
    kept_alive = score_on(kept)
    new_connection = httpx.post(f"{url}/v1/score", json=BODY, timeout=10)
    readiness = httpx.get(f"{url}/health_generate", timeout=5).status_code
    liveness = httpx.get(f"{url}/health", timeout=5).status_code
    load = httpx.get(f"{url}/get_load", timeout=5).json()[0]
    metrics = gauges(url)
    alive = process.poll() is None
    released_s = time.monotonic()
    process.stdin.close()  # the forwards may run now
    for thread in threads:
        thread.join(timeout=30)
    return_code = process.wait(timeout=30)
    exit_s = time.monotonic() - released_s
    print(f"\ndrain: exited {exit_s:.2f} s after the admitted work was released")
    return DrainStory(kept_alive, new_connection, readiness, liveness, load, metrics, alive,
                      admitted, return_code, exit_s, is_listening(url), servers["story"].log)


def test_readiness_is_503_and_liveness_200_while_draining(story):
    assert (story.readiness, story.liveness) == (503, 200)


@pytest.mark.parametrize("connection", ["kept-alive", "new"])
def test_new_work_is_503_with_retry_after(story, connection):
    if connection == "kept-alive":
        status, headers, body = story.kept_alive
    else:
        response = story.new_connection
        status, headers, body = response.status_code, dict(response.headers), response.json()
    headers = {name.lower(): value for name, value in headers.items()}
    assert status == 503 and int(headers["retry-after"]) >= 1
    assert headers["connection"] == "close"  # a kept-alive client reconnects, elsewhere
    assert body["object"] == "error" and body["code"] == 503
    assert body["type"] == "ServiceUnavailableError" and "shutting down" in body["message"]


def test_get_load_and_metrics_show_the_admitted_work_while_draining(story):
    assert story.alive_while_work_left
    assert story.load["num_reqs"] == NUM_ADMITTED * NUM_ITEMS
    assert story.load["num_waiting_reqs"] == NUM_ADMITTED * NUM_ITEMS - 2  # 2 in the held forward
    assert story.metrics["sglang:num_running_reqs"] == 2
    assert story.metrics["sglang:num_queue_reqs"] == NUM_ADMITTED * NUM_ITEMS - 2


def test_every_admitted_request_gets_200(story):
    assert len(story.admitted) == NUM_ADMITTED
    for response in story.admitted:
        assert isinstance(response, httpx.Response) and response.status_code == 200, response
        assert len(response.json()["scores"]) == NUM_ITEMS


def test_the_process_exits_0_and_stops_listening_once_nothing_is_left(story):
    assert story.return_code == 0, story.log[-2000:]
    assert not story.listening_after_exit
    assert "drained in" in story.log and "Application shutdown complete" in story.log
    assert "Traceback" not in story.log


def test_the_drain_timeout_bounds_the_drain_and_what_is_left_gets_503(servers):
    server = servers["drain-timeout"]
    threads, admitted = admit(server.url, 1)
    signalled_s = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    return_code = server.process.wait(timeout=20)  # the forward is never released
    print(f"\ndrain timeout 1 s: exited {time.monotonic() - signalled_s:.2f} s after SIGTERM")
    threads[0].join(timeout=10)
    log = server.log
    assert return_code == 1 and "drain timed out" in log, log[-2000:]
    # Not the request's own 504 at 30 s: the drain's end answered it, and it may retry elsewhere.
    response = admitted[0]
    assert isinstance(response, httpx.Response) and response.status_code == 503, response
    assert "retry-after" in response.headers and "stopped" in response.json()["message"]


def test_a_second_signal_exits_at_once(servers):
    server = servers["second-signal"]
    threads, _ = admit(server.url, 1)
    server.process.send_signal(signal.SIGTERM)
    wait_not_ready(server.url)
    assert server.process.poll() is None  # draining: the held forward keeps it alive
    signalled_s = time.monotonic()
    server.process.send_signal(signal.SIGINT)
    return_code = server.process.wait(timeout=10)  # the forward is still held: "now" means now
    print(f"\nsecond signal: exited {time.monotonic() - signalled_s:.2f} s after it")
    threads[0].join(timeout=10)
    log = server.log
    assert return_code == 1 and "exiting now" in log, log[-2000:]


DRAIN_CASES = {
    "work-left-before-the-deadline": (3, 10.0, None),
    "nothing-left": (0, 10.0, DrainOutcome.DRAINED),
    "nothing-left-at-the-deadline": (0, 20.0, DrainOutcome.DRAINED),  # drained wins the tie
    "work-left-at-the-deadline": (3, 20.0, DrainOutcome.TIMED_OUT),
}


@pytest.mark.parametrize("num_sequences, now_s, expected", DRAIN_CASES.values(),
                         ids=DRAIN_CASES.keys())
def test_drain_outcome(num_sequences, now_s, expected):
    assert drain_outcome(num_sequences, now_s, deadline_s=20.0) is expected
