"""The server's access log: no line for probes, /get_load polls and /metrics scrapes unless
--access-log-all; a line for every score request. In-process (real uvicorn with the server's
logging config, real HTTP) and, slow, `python -m server` on a tiny model read from its output."""
from __future__ import annotations

import io
import logging
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bench.server_process import free_port
from scoringfleet_contract.facts import QUIET_PATHS
from server.access_log import QuietPathsFilter, is_quiet
from tests.kit.runners import FakeRunner
from tests.kit.servers import server_env, serving, wait_ready

REPO = Path(__file__).resolve().parents[2]
POLLED = ("/get_load", "/metrics", "/health", "/health_generate")
SCORE = {"query": [1, 2, 3], "items": [[4, 5]], "label_token_ids": [7, 8]}


@pytest.mark.parametrize(("path", "quiet"), [
    ("/get_load", True), ("/metrics", True), ("/health", True), ("/health_generate", True),
    ("/ready", True), ("/metrics?x=1", True), ("/v1/score", False), ("/get_server_info", False),
    ("/metrics/extra", False),
])
def test_is_quiet(path, quiet):
    assert is_quiet(path) is quiet


def test_the_filter_reads_uvicorns_access_record():
    def record(path):  # uvicorn's access record: (client, method, full path, version, status)
        return logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1,
                                 '%s - "%s %s HTTP/%s" %d', ("1.2.3.4:5", "GET", path, "1.1", 200),
                                 None)
    assert [QuietPathsFilter().filter(record(p)) for p in ("/get_load", "/v1/score")] == \
        [False, True]


def _access_lines(access_log_all: bool) -> list[str]:
    """Every line uvicorn's access handler (the server's config, filter included) writes for a
    live in-process server after 20 polls of each POLLED path and one score request."""
    written = io.StringIO()
    with serving(FakeRunner(), access_log_all=access_log_all) as (url, _):
        (handler,) = logging.getLogger("uvicorn.access").handlers  # made by this server's config
        handler.setLevel(logging.INFO)
        previous = handler.setStream(written)
        logging.getLogger("uvicorn.access").setLevel(logging.INFO)  # live_server says warning
        try:
            with httpx.Client(base_url=url, timeout=5) as client:
                for _ in range(20):
                    for path in POLLED:
                        assert client.get(path).status_code == 200
                assert client.post("/v1/score", json=SCORE).status_code == 200
        finally:
            handler.setStream(previous)
    return written.getvalue().splitlines()


def test_20_polls_of_each_quiet_path_write_no_access_line():
    lines = _access_lines(access_log_all=False)
    assert len(lines) == 1 and '"POST /v1/score HTTP/1.1" 200' in lines[0], lines


def test_access_log_all_writes_a_line_for_every_request():
    lines = _access_lines(access_log_all=True)
    assert len(lines) == 20 * len(POLLED) + 1
    assert {path for path in POLLED if any(f"GET {path} " in line for line in lines)} == \
        set(POLLED) <= QUIET_PATHS


@pytest.mark.slow
@pytest.mark.parametrize("flags", [(), ("--access-log-all",)], ids=["default", "all"])
def test_python_m_server_logs_score_requests_not_polls(tiny_model_dir, flags):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "server", "--model-path", str(tiny_model_dir), "--port", str(port),
         "--dtype", "float32", "--num-threads", "1", *flags],
        cwd=REPO, env=server_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_ready(process, url)  # its own /health_generate polls count too
        with httpx.Client(base_url=url, timeout=10) as client:
            for _ in range(20):
                client.get("/get_load")
                client.get("/metrics")
            body = {"query": "Is this a fruit?", "items": ["apple"], "label_token_ids": [1, 2]}
            assert client.post("/v1/score", json=body).status_code == 200
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        log = process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        process.stdout.close()
    polls = [line for line in log.splitlines() if "GET /get_load" in line or "GET /metrics" in line]
    assert "POST /v1/score HTTP/1.1\" 200" in log, log[-2000:]
    assert len(polls) == (40 if flags else 0), log[-2000:]
