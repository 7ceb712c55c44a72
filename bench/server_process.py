"""Run a server (`python -m server`, or bench.free_server) as a child process on a loopback port,
wait until it is ready, read its memory from /proc, and always stop it (SIGTERM, then SIGKILL).

Linux only (/proc/<pid>/status): VmRSS is the resident set now, VmHWM its peak since start.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

READY_PATH = "/health_generate"


class ServerFailed(RuntimeError):
    """The server exited or did not become ready; the message holds the tail of its log."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def read_status_kib(pid: int, field: str) -> int:
    """A `Vm*` field of /proc/<pid>/status in KiB (0 if the field is absent)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


@dataclass
class ServerProcess:
    process: subprocess.Popen
    url: str
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_mib(self) -> float:
        return read_status_kib(self.pid, "VmRSS") / 1024

    def peak_rss_mib(self) -> float:
        """The process's peak resident set since it started (includes loading the model)."""
        return read_status_kib(self.pid, "VmHWM") / 1024

    def log_tail(self, num_lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-num_lines:])

    def wait_ready(self, timeout_s: float = 180.0, path: str = READY_PATH) -> None:
        """Poll GET `path` (readiness) until 200; ServerFailed if it exits or the time runs out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerFailed(f"server exited with {self.process.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + path, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise ServerFailed(f"server not ready after {timeout_s:g} s:\n{self.log_tail()}")


@contextlib.contextmanager
def start_server(module: str, args: list[str], host: str = "127.0.0.1",
                 env: dict[str, str] | None = None):
    """Start `python -m <module> --host <host> --port <free port> <args>` and yield its
    ServerProcess at once (call wait_ready() before use: loading overlaps other work meanwhile).
    The process is stopped when the block exits, however it exits."""
    port = free_port(host)
    with tempfile.NamedTemporaryFile("w", prefix=f"{module}-", suffix=".log", delete=False) as log:
        log_path = Path(log.name)
        process = subprocess.Popen(
            [sys.executable, "-m", module, "--host", host, "--port", str(port), *args],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
            cwd=Path(__file__).resolve().parent.parent)
    server = ServerProcess(process, f"http://{host}:{port}", log_path)
    try:
        yield server
    finally:
        stop(process)
        log_path.unlink(missing_ok=True)


def stop(process: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """SIGTERM `process` and reap it; SIGKILL if it has not exited within timeout_s."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout_s)


class RssSampler:
    """Samples a process's VmRSS every interval_s in a thread while the block runs; `peak_mib`
    is the highest sample (the peak under load, unlike VmHWM which includes start-up)."""

    def __init__(self, pid: int, interval_s: float = 0.1) -> None:
        self.pid, self.interval_s = pid, interval_s
        self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak_mib = max(self.peak_mib, read_status_kib(self.pid, "VmRSS") / 1024)
            except OSError:  # the process is gone
                return
            self._stop.wait(self.interval_s)
