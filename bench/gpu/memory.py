"""Peak GPU memory of a process (the server), sampled from nvidia-smi while a block runs: the
server is another process, so torch.cuda's own counters in this one cannot see it."""
from __future__ import annotations

import shutil
import subprocess
import threading
from typing import Self

QUERY = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]


def parse_used_mib(text: str, pid: int) -> float:
    """MiB that nvidia-smi's compute-apps CSV lists for `pid` (0 if absent)."""
    used = 0.0
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid) and parts[1].replace(".", "").isdigit():
            used += float(parts[1])
    return used


class GpuMemorySampler:
    """`peak_mib` is the highest sample; None when nvidia-smi is not there (CPU, dry run)."""

    def __init__(self, pid: int, interval_s: float = 0.5) -> None:
        self.pid, self.interval_s = pid, interval_s
        self.peak_mib: float | None = 0.0 if shutil.which("nvidia-smi") else None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Self:
        if self.peak_mib is not None:
            self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(QUERY, capture_output=True, text=True, timeout=5,
                                     check=False).stdout
                self.peak_mib = max(self.peak_mib or 0.0, parse_used_mib(out, self.pid))
            except (OSError, subprocess.TimeoutExpired):
                pass  # a missed sample is not a zero
            self._stop.wait(self.interval_s)
