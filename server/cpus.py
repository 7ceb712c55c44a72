"""How many CPUs this process may really use: its affinity mask, capped by its cgroup CPU quota.

torch defaults to one thread per core it can see, and in a container that is every core of the node
even when the pod may use only a few: on a shared 2-core machine two threads ran slower than one
(docs/performance.md). So the server sizes torch's pool from the quota, not the core count.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max <period>"


def usable_cpus(num_affine: int, cpu_max: str | None) -> int:
    """min(affinity, ceil(quota / period)); at least 1. cpu_max is cgroup v2's cpu.max text."""
    quota_cpus = math.inf
    if cpu_max:
        fields = cpu_max.split()
        if len(fields) == 2 and fields[0] != "max":
            try:
                quota, period = int(fields[0]), int(fields[1])
            except ValueError:
                quota, period = 0, 0
            if quota > 0 and period > 0:
                quota_cpus = math.ceil(quota / period)
    return max(1, int(min(num_affine, quota_cpus)))


def detect_usable_cpus() -> int:
    try:
        num_affine = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        num_affine = os.cpu_count() or 1
    try:
        cpu_max = CGROUP_CPU_MAX.read_text()
    except OSError:
        cpu_max = None
    return usable_cpus(num_affine, cpu_max)
