"""Helpers for the gateway's process tests: `python -m gateway` as a real process, workers as real
server processes (the real app and scheduler over a runner that costs nothing or holds each batch),
and reading /metrics with Prometheus' own parser."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.server_process import free_port, stop
from tests.kit.waiting import wait_http

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def gateway_process(*args: str, log_path: Path, env: dict | None = None):
    """`python -m gateway --port <free> *args`; yields its base URL once /health answers."""
    port = free_port()
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "gateway", "--port", str(port), *args],
                                   cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                   env=env or dict(os.environ))
        try:
            wait_http(f"http://127.0.0.1:{port}/health", process=process)
            yield f"http://127.0.0.1:{port}"
        finally:
            stop(process)


def start_worker(hold_s: float = 0.0, host: str = "127.0.0.1", port: int | None = None,
                 log_path: Path | None = None, *server_args: str,
                 env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """A scoring server process (bench.paced_server) whose batches take hold_s; not yet ready."""
    port = port or free_port()
    with open(log_path or os.devnull, "w") as out:  # the child keeps its own copy of the file
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.paced_server", "--batch-s", str(hold_s),
             "--host", host, "--port", str(port), *server_args],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env or dict(os.environ))
    return process, f"http://{host}:{port}"


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """/metrics as {(sample name, sorted labels): value}, parsed by prometheus_client."""
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(url: str, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels` (as PromQL's sum over a selector):
    a label the test does not name (a request's model, the waiting room's fleet) is summed over."""
    wanted = set(labels.items())
    return sum(value for (sample_name, sample_labels), value in scrape(url).items()
               if sample_name == name and wanted <= set(sample_labels))


def score_body(num_items: int = 2, **extra) -> dict:
    return {"query": [1, 2, 3], "items": [[4, 5]] * num_items, "label_token_ids": [7, 8], **extra}
