"""Test helper: bounded polling (tests never sleep for correctness)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

WAIT_S = 10.0


def wait_for(probe: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    """Poll `probe` until it returns something truthy; fail with `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last: {value!r}")
        time.sleep(0.05)
