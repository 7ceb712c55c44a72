"""SGLang's own gateway (`smg`, PyPI sglang-router, pinned in the test extra) over our servers:
with --policy power_of_two its /get_loads shows the load our /get_load reports (smg reads
`num_tokens`), and 0 within seconds after the load is gone.

Started so that it never reaches outside the machine: HF_ENDPOINT on a dead loopback port,
HF_HUB_OFFLINE=1 (it looks up a tokenizer at start), no proxy variables (they disable its
discovery). Nothing is sent through it: it has no /v1/score route, and any path our server lacks
would count against its circuit breaker.
"""
import contextlib
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from bench.server_process import free_port, stop
from tests.gateway.support import score_body
from tests.kit.runners import FakeRunner
from tests.kit.servers import serving
from tests.kit.waiting import wait_for

# The test extra installs it (sglang-router); missing, the test fails rather than pass unseen.
SMG = shutil.which("smg", path=str(Path(sys.executable).parent)) or shutil.which("smg") or "smg"
pytestmark = pytest.mark.slow


@contextlib.contextmanager
def smg(worker_urls: list[str], log_path: Path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    args = [SMG, "launch", "--host", "127.0.0.1", "--port", str(port), "--policy", "power_of_two",
            "--worker-urls", *worker_urls, "--worker-startup-check-interval", "1",
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
            "--log-level", "debug"]
    with open(log_path, "w") as log:
        process = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(process)


def smg_loads(url: str) -> dict[str, int] | None:
    with contextlib.suppress(httpx.HTTPError):
        return {w["worker"]: w["load"] for w in httpx.get(f"{url}/get_loads", timeout=2).json()["workers"]}
    return None


def our_tokens(url: str) -> int:
    return httpx.get(f"{url}/get_load", timeout=5).json()[0]["num_tokens"]


def test_smg_power_of_two_sees_our_loads_then_zero(tmp_path):
    gate = threading.Event()  # holds every forward, so the loads stand still while smg polls
    with serving(FakeRunner(gate=gate), max_running_requests=8) as (busy, _), \
            serving(FakeRunner(gate=gate), max_running_requests=8) as (light, _), \
            serving(FakeRunner()) as (idle, _), \
            smg([busy, light, idle], tmp_path / "smg.log") as router:
        senders = [threading.Thread(target=httpx.post, args=(f"{url}/v1/score",),
                                    kwargs={"json": score_body(n), "timeout": 60})
                   for url, n in ((busy, 40), (light, 10))]
        try:
            for sender in senders:
                sender.start()
            wait_for(lambda: our_tokens(busy) > our_tokens(light) > 0)
            expected = {busy: our_tokens(busy), light: our_tokens(light), idle: 0}
            wait_for(lambda: smg_loads(router) == expected, timeout_s=30)
        finally:
            gate.set()
            for sender in senders:
                sender.join(timeout=30)
        wait_for(lambda: smg_loads(router) == {busy: 0, light: 0, idle: 0}, timeout_s=10)
    log = re.sub(r"\x1b\[[0-9;]*m", "", (tmp_path / "smg.log").read_text())
    # it lists the model by our /get_server_info's served_model_name, not as "default"
    assert "Assigning policy power_of_two to new model SmolLM2-135M-Instruct" in log
