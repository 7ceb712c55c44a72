"""What `python -m gateway` writes to its log, read from the real process's output: no access-log
line for probes, /get_load and /metrics (unless --access-log-all), one per score request, and one
line per worker transition with its reason; and the request-duration histogram it exports."""
import os
import re
import signal
import time
from pathlib import Path

import httpx

from bench.server_process import stop
from tests.gateway.support import gateway_process, sample, score_body, start_worker
from tests.kit.runners import FakeRunner
from tests.kit.servers import serving
from tests.kit.waiting import wait_for, wait_http

G = "scoringfleet_gateway"
QUIET = ("/health", "/ready", "/health_generate", "/get_load", "/metrics")


def access_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if " aiohttp.access: " in line]


def transitions(log: Path, url: str) -> list[str]:
    """The states logged for `url`, in order ('worker <url>: <state> (<reason>)')."""
    pattern = re.compile(rf"worker {re.escape(url)}: (\w+) \((.+)\)$")
    return [f"{m[1]} ({m[2]})" for line in log.read_text().splitlines()
            if (m := pattern.search(line))]


def poll_quiet_paths(gateway: str, times: int = 20) -> None:
    with httpx.Client(base_url=gateway, timeout=5) as client:
        for _ in range(times):
            for path in QUIET:
                client.get(path)


def test_polls_and_scrapes_write_no_access_line_and_a_score_request_one(tmp_path):
    log = tmp_path / "gateway.log"
    with serving(FakeRunner()) as (worker, _), \
            gateway_process("--worker-urls", worker, log_path=log) as gateway:
        wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 1)
        poll_quiet_paths(gateway)
        assert httpx.post(f"{gateway}/v1/score", json=score_body(), timeout=10).status_code == 200
        wait_for(lambda: access_lines(log), timeout_s=5)
        lines = access_lines(log)
        assert len(lines) == 1 and '"POST /v1/score HTTP/1.1" 200' in lines[0], lines
        # The answer's time, by code, in the histogram.
        assert sample(gateway, f"{G}_request_duration_seconds_count", code="200") == 1
        assert sample(gateway, f"{G}_request_duration_seconds_bucket", code="200", le="+Inf") == 1
        assert sample(gateway, f"{G}_request_duration_seconds_sum", code="200") > 0


def test_access_log_all_brings_the_polls_lines_back(tmp_path):
    log = tmp_path / "gateway.log"
    with serving(FakeRunner()) as (worker, _), \
            gateway_process("--worker-urls", worker, "--access-log-all", log_path=log) as gateway:
        poll_quiet_paths(gateway, times=2)
        wait_for(lambda: len(access_lines(log)) >= 2 * len(QUIET), timeout_s=5)
        logged = " ".join(access_lines(log))
        assert all(f"GET {path} " in logged for path in QUIET), logged


def test_each_worker_transition_is_logged_once_with_its_reason(tmp_path):
    worker, url = start_worker(log_path=tmp_path / "worker.log")
    log = tmp_path / "gateway.log"

    def logged_since(count: int, state: str):
        return [e for e in transitions(log, url)[count:] if e.startswith(state)]

    try:
        wait_http(f"{url}/health_generate", timeout_s=60, process=worker)
        with gateway_process("--worker-urls", url, log_path=log) as gateway:
            wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 1)
            before_freeze = len(transitions(log, url))
            os.kill(worker.pid, signal.SIGSTOP)  # frozen: its polls time out
            frozen = wait_for(lambda: logged_since(before_freeze, "stale"), timeout_s=10)
            os.kill(worker.pid, signal.SIGCONT)
            wait_for(lambda: transitions(log, url)[-1].startswith("ready"), timeout_s=10)
            before_kill = len(transitions(log, url))
            worker.kill()  # gone: its polls are refused
            worker.wait(timeout=10)
            killed = wait_for(lambda: logged_since(before_kill, "stale"), timeout_s=10)
            time.sleep(0.5)  # ~10 more failed polls: none may log again
            logged = transitions(log, url)
    finally:
        stop(worker)
    assert logged[:2] == ["joined (waiting for its first /get_load answer)",
                          "ready (/get_load answered)"], logged
    assert frozen[0] == "stale (/get_load failed: TimeoutError)", logged
    assert killed == logged[before_kill:], logged  # one line, and nothing after it
    # Refused (ClientConnectorError), or reset if the kill came mid-poll (ClientOSError).
    assert re.match(r"stale \(/get_load failed: Client(Connector|OS)Error: .+\)$", killed[0]), logged
    # Once per change: never the same state twice in a row, never an empty reason.
    assert all(a.split()[0] != b.split()[0] for a, b in zip(logged, logged[1:])), logged
    assert "()" not in " ".join(logged)
