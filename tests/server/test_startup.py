"""A starting server through real HTTP: the real app and DrainingServer over an EngineStartup whose
"model" loads until the test opens a gate (no sleeps). While it loads: /health 200, /metrics and
/get_load true zeros with the loading state, readiness, scores, model routes and /freeze_gc 503.
Once loaded it serves; a load that fails ends the server with exit code 2 and one ERROR line.
"""
from __future__ import annotations

import threading

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.server_process import free_port
from server.app import create_app
from server.connections import uvicorn_config
from server.drain import DrainingServer
from server.errors import ModelLoadError
from server.startup import EngineStartup
from tests.kit.runners import FakeRunner
from tests.kit.servers import cpu_config, live_server
from tests.kit.waiting import wait_for

BODY = {"query": [1, 2, 3], "items": [[4, 5], [6]], "label_token_ids": [7, 8]}


def samples(url: str) -> dict[str, float]:
    """/metrics by sample name (one label set each here), through Prometheus' own parser."""
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}


class GatedLoad:
    """A load that waits for `gate`, then returns the config and a FakeRunner (or raises)."""

    def __init__(self, config, error: Exception | None = None) -> None:
        self.config, self.error, self.gate = config, error, threading.Event()

    def __call__(self):
        assert self.gate.wait(timeout=30)
        if self.error is not None:
            raise self.error
        return self.config, FakeRunner()


@pytest.fixture
def starting():
    """(base URL, startup, load) of a live server whose model is loading until load.gate is set."""
    config = cpu_config(port=free_port())
    load = GatedLoad(config)
    startup = EngineStartup(config, load)
    with live_server(config, startup) as url:
        yield url, startup, load
    load.gate.set()


def test_a_loading_server_answers_probes_and_scrapes_with_true_zeros(starting):
    url, _, _ = starting
    assert httpx.get(f"{url}/health").status_code == 200
    values = samples(url)
    assert values["scoringfleet_model_loading"] == 1
    assert values["sglang:num_running_reqs"] == values["sglang:num_queue_reqs"] == 0
    assert values["sglang:num_requests_total"] == 0
    assert values["process_start_time_seconds"] > 0  # a restarted process shows a new one
    load = httpx.get(f"{url}/get_load")
    assert load.status_code == 200 and load.headers["x-model-loading"] == "true"
    assert [(e["num_reqs"], e["num_waiting_reqs"], e["num_tokens"]) for e in load.json()] == [(0, 0, 0)]


@pytest.mark.parametrize("method, path", [
    ("GET", "/health_generate"), ("POST", "/v1/score"), ("GET", "/v1/models"),
    ("GET", "/get_server_info"), ("POST", "/freeze_gc"),
])
def test_a_loading_server_refuses_what_needs_the_model_with_a_503(starting, method, path):
    url, _, _ = starting
    response = httpx.request(method, f"{url}{path}", json=BODY if path == "/v1/score" else None)
    assert response.status_code == 503
    body = response.json()
    assert body["object"] == "error" and body["type"] == "ServiceUnavailableError"
    assert "loading" in body["message"]


def test_once_loaded_it_serves_and_says_so(starting):
    url, startup, load = starting
    load.gate.set()
    wait_for(lambda: httpx.get(f"{url}/health_generate").status_code == 200)
    assert samples(url)["scoringfleet_model_loading"] == 0
    assert httpx.get(f"{url}/get_load").headers["x-model-loading"] == "false"
    scored = httpx.post(f"{url}/v1/score", json=BODY)
    assert scored.status_code == 200 and len(scored.json()["scores"]) == 2
    assert httpx.get(f"{url}/get_server_info").json()["device"] == "cpu"
    assert httpx.get(f"{url}/v1/models").json()["data"][0]["max_model_len"] == 512
    assert startup.engine is not None and not startup.load_failed


def test_freeze_gc_answers_as_sglang_does_once_loaded(starting):
    url, _, load = starting
    load.gate.set()
    wait_for(lambda: httpx.get(f"{url}/health_generate").status_code == 200)
    for method in ("POST", "GET"):  # SGLang's route takes both
        response = httpx.request(method, f"{url}/freeze_gc")
        assert (response.status_code, response.text) == (200, "Garbage collection frozen.\n")


def test_a_drain_that_begins_while_loading_keeps_the_loaded_engine_out_of_work(starting):
    url, startup, load = starting
    startup.begin_drain()
    load.gate.set()
    wait_for(lambda: startup.engine is not None)
    assert startup.engine.is_draining and not startup.is_ready
    assert httpx.get(f"{url}/health_generate").json()["message"] == "not ready: draining"


def test_a_model_that_fails_to_load_ends_the_server_with_2_and_one_error_line(caplog):
    config = cpu_config(port=free_port())
    load = GatedLoad(config, ModelLoadError("GGUF file not found: /nothing.gguf"))
    startup = EngineStartup(config, load)
    server = DrainingServer(uvicorn_config(create_app(config, startup), config, "warning"), startup,
                            config.drain_timeout_s)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started)
    assert httpx.get(f"http://127.0.0.1:{config.port}/health").status_code == 200
    load.gate.set()
    thread.join(timeout=10)  # it ends by itself: nobody asked it to
    assert not thread.is_alive() and server.exit_code == 2 and startup.engine is None
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == ["GGUF file not found: /nothing.gguf"]
