"""`python -m gateway` over a real server whose model is loading (the real app and EngineStartup;
its load waits for a gate the test opens, no sleeps): the gateway sees the loading state in the
/get_load poll, sends it nothing (a request waits in the waiting room instead, then is routed once,
when the model is in), and answers /v1/models and /get_server_info from a ready worker, 503 while
there is none."""
from __future__ import annotations

import threading

import httpx
import pytest

from bench.server_process import free_port
from server.startup import EngineStartup
from tests.gateway.support import gateway_process, sample, score_body
from tests.kit.runners import FakeRunner
from tests.kit.servers import cpu_config, live_server
from tests.kit.waiting import wait_for

G = "scoringfleet_gateway"


@pytest.fixture
def loading_fleet(tmp_path):
    """(gateway URL, worker URL, gate): one worker loading until gate is set, behind a gateway."""
    config = cpu_config(port=free_port(), served_model_name="tiny-scorer")
    gate = threading.Event()

    def load():
        assert gate.wait(timeout=60)
        return config, FakeRunner()

    with live_server(config, EngineStartup(config, load)) as worker, \
            gateway_process("--worker-urls", worker, log_path=tmp_path / "gateway.log") as gateway:
        wait_for(lambda: sample(gateway, f"{G}_workers", state="loading") == 1)
        yield gateway, worker, gate
        gate.set()


def test_a_loading_worker_gets_no_request_until_its_model_is_in(loading_fleet):
    gateway, worker, gate = loading_fleet
    answers: list[httpx.Response] = []
    client = threading.Thread(target=lambda: answers.append(
        httpx.post(f"{gateway}/v1/score", json=score_body(), timeout=30)))
    client.start()
    wait_for(lambda: sample(gateway, f"{G}_waiting_requests") == 1)
    assert sample(gateway, f"{G}_routed_total", worker=worker) == 0
    gate.set()
    client.join(timeout=30)
    assert answers and answers[0].status_code == 200, answers and answers[0].text
    # one attempt in all: none was made while it loaded (that would be a 503 and a retry)
    assert sample(gateway, f"{G}_routed_total", worker=worker) == 1
    assert sample(gateway, f"{G}_workers", state="ready") == 1


@pytest.mark.parametrize("path", ["/v1/models", "/get_server_info"])
def test_model_routes_are_503_while_no_worker_is_ready_then_a_workers_answer(loading_fleet, path):
    gateway, worker, gate = loading_fleet
    refused = httpx.get(f"{gateway}{path}")
    assert refused.status_code == 503 and refused.json()["param"] == "gateway"
    gate.set()
    wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 1)
    answer = httpx.get(f"{gateway}{path}")
    assert answer.status_code == 200
    assert answer.json() == httpx.get(f"{worker}{path}").json()
    if path == "/v1/models":
        assert [model["id"] for model in answer.json()["data"]] == ["tiny-scorer"]
