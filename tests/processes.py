"""Stopping the subprocesses tests start (servers, operators): SIGTERM, then SIGKILL if it hangs."""
from __future__ import annotations

import subprocess


def stop(process: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """Terminate and reap `process`; kill it if it has not exited within timeout_s."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout_s)
