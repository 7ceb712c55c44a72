"""The API key end to end: `python -m server` processes and `python -m gateway` that read it from
SCORINGFLEET_API_KEY (as the operator renders it from a Secret). With the same key a request with
it gets 200 and one without it the gateway's 401; with a wrong key on the gateway every worker shows
as refusing it (/ready 503 with the reason, workers{state="unauthorized"}, a log line), /health
stays 200, and a request gets the gateway's 503, never a worker's 401."""
from __future__ import annotations

import contextlib
import os

import httpx
import pytest

from bench.server_process import stop
from scoringfleet_contract.facts import API_KEY_ENV
from tests.gateway.support import gateway_process, sample, score_body, start_worker
from tests.kit.waiting import wait_for, wait_http

G = "scoringfleet_gateway"
KEY = "fleet-key-0123"


def with_key(key: str) -> dict:
    return {**os.environ, API_KEY_ENV: key}


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """Two real server processes whose key comes from the env var only; yields their URLs."""
    logs = tmp_path_factory.mktemp("workers")
    with contextlib.ExitStack() as stack:
        urls = []
        for i in range(2):
            process, url = start_worker(log_path=logs / f"worker{i}.log", env=with_key(KEY))
            stack.callback(stop, process)
            wait_http(f"{url}/health_generate", timeout_s=60, process=process)
            urls.append(url)
        yield urls


def test_with_the_key_200_without_it_the_gateways_401(workers, tmp_path):
    direct = httpx.post(f"{workers[0]}/v1/score", json=score_body())
    assert direct.status_code == 401 and direct.json()["param"] is None  # the server's own
    with gateway_process("--worker-urls", *workers, log_path=tmp_path / "gateway.log",
                         env=with_key(KEY)) as gateway:
        wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 2)
        assert httpx.get(f"{gateway}/ready").status_code == 200
        ok = httpx.post(f"{gateway}/v1/score", json=score_body(),
                        headers={"Authorization": f"Bearer {KEY}"})
        assert ok.status_code == 200 and len(ok.json()["scores"]) == 2
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            refused = httpx.post(f"{gateway}/v1/score", json=score_body(), headers=headers)
            assert refused.status_code == 401
            assert refused.json()["type"] == "AuthenticationError"
            assert refused.json()["param"] == "gateway"
        assert sample(gateway, f"{G}_requests_total", code="401") == 2
        assert sum(sample(gateway, f"{G}_routed_total", worker=url) for url in workers) == 1
    assert KEY not in (tmp_path / "gateway.log").read_text()


def test_a_wrong_key_on_the_gateway_shows_as_not_ready_with_the_reason(workers, tmp_path):
    log_path = tmp_path / "gateway.log"
    with gateway_process("--worker-urls", *workers, "--queue-timeout", "1", log_path=log_path,
                         env=with_key("not-the-fleet-key")) as gateway:
        wait_for(lambda: sample(gateway, f"{G}_workers", state="unauthorized") == 2)
        assert sample(gateway, f"{G}_workers", state="ready") == 0
        ready = httpx.get(f"{gateway}/ready")
        assert ready.status_code == 503 and ready.json()["param"] == "gateway"
        assert "2 reject the gateway's API key" in ready.json()["message"]
        assert httpx.get(f"{gateway}/health").status_code == 200  # liveness: still takes requests
        answer = httpx.post(f"{gateway}/v1/score", json=score_body(),
                            headers={"Authorization": "Bearer not-the-fleet-key"})
        assert answer.status_code == 503 and answer.json()["param"] == "gateway"
        assert sum(sample(gateway, f"{G}_routed_total", worker=url) for url in workers) == 0
    log = log_path.read_text()
    for url in workers:
        assert f"worker {url}: unauthorized (rejects the gateway's API key" in log
    assert "not-the-fleet-key" not in log


def test_the_flag_wins_over_the_env_var(workers, tmp_path):
    with gateway_process("--worker-urls", *workers, "--api-key", KEY,
                         log_path=tmp_path / "gateway.log", env=with_key("stale")) as gateway:
        wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 2)
        assert httpx.post(f"{gateway}/v1/score", json=score_body(),
                          headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
