"""The real `python -m server` as a subprocess: it starts on a tiny model folder and scores; on
SIGTERM it lets admitted requests finish, refuses new ones, and exits cleanly; bad flags and a
missing model end with an error message, never a traceback or a hang.

One server process serves the whole startup-and-drain story (a module fixture records what
happened; each test checks one part of it), so the module pays for one interpreter start.
"""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from bench.server_process import free_port
from server.__main__ import main
from tests.kit.servers import server_env, wait_ready
from tests.kit.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
NUM_DRAIN_ITEMS = 300  # with --max-running-requests 1 these take ~1 s on the tiny model
SCORE_BODY = {"query": "What is the capital of California?", "items": ["Sacramento", "San Jose"],
              "label_token_ids": [5, 17]}


def server_command(*flags: str) -> list[str]:
    return [sys.executable, "-m", "server", *flags]


@dataclass
class FirstAnswer:
    """What the process answered first, while its model was still loading."""

    after_s: float                    # since the process was started
    metrics: str
    load: list[dict]
    ready_status: int
    score_status: int


def first_answer(url: str, started: float) -> FirstAnswer:
    """Polls /metrics from the process's start until it answers, then asks the rest at once."""
    def answers() -> bool:
        try:
            return httpx.get(f"{url}/metrics", timeout=1).status_code == 200
        except httpx.TransportError:
            return False
    wait_for(answers, timeout_s=60, interval_s=0.05)
    after_s = time.monotonic() - started
    return FirstAnswer(after_s, httpx.get(f"{url}/metrics").text, httpx.get(f"{url}/get_load").json(),
                       httpx.get(f"{url}/health_generate").status_code,
                       httpx.post(f"{url}/v1/score", json=SCORE_BODY, timeout=5).status_code)


@dataclass
class DrainStory:
    first_answer: FirstAnswer
    first_score: httpx.Response
    ready_before: int
    admitted: httpx.Response          # a long request in flight when SIGTERM arrived
    waiting_at_sigterm: int
    refused: list[str]                # what new requests got after SIGTERM
    return_code: int
    log: str


def outcome_of_new_request(url: str) -> str:
    try:
        return str(httpx.post(f"{url}/v1/score", json=SCORE_BODY, timeout=5).status_code)
    except httpx.ConnectError:
        return "refused"


@pytest.fixture(scope="module")
def drain_story(tiny_model_dir) -> DrainStory:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        server_command("--model-path", str(tiny_model_dir), "--host", "127.0.0.1",
                       "--port", str(port), "--dtype", "float32", "--max-running-requests", "1",
                       "--num-threads", "1"),
        cwd=REPO, env=server_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        started = time.monotonic()
        early = first_answer(url, started)
        wait_ready(process, url)
        print(f"\nserver ready {time.monotonic() - started:.1f} s after start")
        first = httpx.post(f"{url}/v1/score", json=SCORE_BODY, timeout=10)
        ready = httpx.get(f"{url}/health_generate").status_code
        long_body = {**SCORE_BODY, "items": [f"apple banana fruit {i}" for i in range(NUM_DRAIN_ITEMS)]}
        admitted: list[httpx.Response] = []
        sender = threading.Thread(target=lambda: admitted.append(
            httpx.post(f"{url}/v1/score", json=long_body, timeout=60)))
        sender.start()
        wait_for(lambda: httpx.get(f"{url}/get_load").json()[0]["num_waiting_reqs"] > 0)
        waiting = httpx.get(f"{url}/get_load").json()[0]["num_waiting_reqs"]
        process.send_signal(signal.SIGTERM)
        refused = [outcome_of_new_request(url) for _ in range(3)]
        signalled = time.monotonic()
        sender.join(timeout=60)
        return_code = process.wait(timeout=60)
        print(f"drained and exited {time.monotonic() - signalled:.1f} s after SIGTERM")
        return DrainStory(early, first, ready, admitted[0], waiting, refused, return_code,
                          process.stdout.read())
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        process.stdout.close()


def test_it_answers_metrics_within_seconds_of_its_start_while_the_model_loads(drain_story):
    early = drain_story.first_answer
    print(f"\n/metrics answered {early.after_s:.1f} s after the process started")
    assert early.after_s < 5, drain_story.log[:2000]
    # torch alone takes seconds to import, on the loading thread: the first answer is a loading one
    assert 'scoringfleet_model_loading{model_name="' in early.metrics
    assert re.search(r"^scoringfleet_model_loading\{.*\} 1\.0$", early.metrics, re.M), early.metrics
    assert re.search(r"^sglang:num_running_reqs\{.*\} 0\.0$", early.metrics, re.M)
    assert [entry["num_reqs"] for entry in early.load] == [0]
    assert (early.ready_status, early.score_status) == (503, 503)


def test_starts_on_a_tiny_model_folder_and_scores(drain_story):
    assert drain_story.ready_before == 200
    assert drain_story.first_score.status_code == 200, drain_story.log
    assert len(drain_story.first_score.json()["scores"]) == 2


def test_the_log_says_the_load_began_how_long_it_took_and_when_the_server_was_ready(drain_story):
    log = drain_story.log
    assert "loading model " in log and "(cpu, float32)" in log
    loaded = re.search(r"model \S+ loaded in (\d+\.\d) s", log)
    ready = re.search(r"ready in (\d+\.\d) s after start; serving on 127\.0\.0\.1:\d+", log)
    assert loaded and ready, log[:3000]
    # the process's age includes the interpreter start and the imports before the load
    assert 0 < float(loaded[1]) <= float(ready[1]) < 120
    assert log.index("loading model") < log.index("loaded in") < log.index("ready in")


def test_sigterm_lets_admitted_requests_finish(drain_story):
    assert drain_story.waiting_at_sigterm > 0  # it really was mid-flight
    assert drain_story.admitted.status_code == 200, drain_story.log
    assert len(drain_story.admitted.json()["scores"]) == NUM_DRAIN_ITEMS


def test_sigterm_refuses_new_requests(drain_story):
    # 503, not "connection refused": the server keeps listening while it drains.
    assert drain_story.refused == ["503"] * 3, drain_story.refused


def test_sigterm_exits_with_code_zero(drain_story):
    assert drain_story.return_code == 0, drain_story.log[-2000:]


def test_sigterm_ends_the_process_after_a_graceful_shutdown(drain_story):
    # The shutdown itself ran to its end (lifespan drained, no traceback) and exited 0.
    assert drain_story.return_code == 0, drain_story.log[-2000:]
    assert "Application shutdown complete" in drain_story.log
    assert "Traceback" not in drain_story.log


BAD_FLAGS = {
    "zero-running-requests": (["--max-running-requests", "0"], "max_running_requests"),
    "port-not-a-number": (["--port", "http"], "--port"),
    "port-out-of-range": (["--port", "70000"], "port"),
    "unknown-dtype": (["--dtype", "int8"], "--dtype"),
    "unknown-flag": (["--speed", "fast"], "unrecognized"),
    "timeout-not-positive": (["--request-timeout", "0"], "request_timeout"),
    "drain-timeout-negative": (["--drain-timeout", "-1"], "drain_timeout"),
    "header-timeout-not-positive": (["--header-timeout", "0"], "header_timeout"),
    "items-above-queue": (["--max-items-per-request", "10", "--max-queued-requests", "5"],
                          "max_items_per_request"),
}


@pytest.mark.parametrize("flags, says", BAD_FLAGS.values(), ids=BAD_FLAGS.keys())
def test_bad_flags_exit_with_a_usage_error(flags, says, capsys):
    # In-process: the flags are parsed before any model is touched.
    with pytest.raises(SystemExit) as exited:
        main(flags)
    assert exited.value.code == 2
    stderr = capsys.readouterr().err
    assert stderr.startswith("usage: python -m server") and says in stderr


def test_bad_flags_exit_2_from_the_real_command_line():
    done = subprocess.run(server_command("--max-running-requests", "-1"), cwd=REPO,
                          env=server_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "usage:" in done.stderr and "max_running_requests must be >= 1" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_model_ends_main_with_2_and_a_message(tmp_path, caplog):
    missing = tmp_path / "nothing.gguf"
    assert main(["--model-path", str(missing), "--port", str(free_port())]) == 2
    assert f"GGUF file not found: {missing}" in caplog.text
