"""Bounded polling: tests never sleep for correctness, and never wait without a bound."""
from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable
from typing import Any

import httpx

WAIT_S = 10.0


def wait_for(probe: Callable[[], Any], what: str = "the condition", timeout_s: float = WAIT_S,
             interval_s: float = 0.02) -> Any:
    """Poll `probe` until it returns something truthy, and return that; AssertionError naming
    `what` (and the last value) after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last: {value!r}")
        time.sleep(interval_s)


def wait_http(url: str, timeout_s: float = 20.0, process: subprocess.Popen | None = None) -> None:
    """Poll GET `url` until 200; fail at once if `process` (the one serving it) exits meanwhile."""
    def answers() -> bool:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"{process.args} exited with {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(url, timeout=1).status_code == 200
        return False
    wait_for(answers, f"{url} to answer 200", timeout_s, interval_s=0.05)
