"""A real Prometheus for the recording-rule tests: Debian's `prometheus` binary (the package `make
setup` installs for promtool), started on 127.0.0.1 with a temp data dir and the chart's rule file,
scraping static targets that carry the labels the chart's monitors produce (namespace, pod, fleet),
read through its HTTP API, and always killed (also if the test process dies: the kernel sends it
SIGKILL when its parent goes).

The targets are a file_sd file, not static_configs: a change of targets then reaches the scrape
pool as Kubernetes service discovery's does. A change of the job's static_configs is a config
change, and reloading it restarts the job's scrape loops: a frozen target's `up` can go stale until
its next scrape fails (1.2 s at a 1 s timeout, seen in some reloads), which Kubernetes SD never causes.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from tests.fleet_operator.loopback import free_port
from tests.kit.waiting import wait_for

BINARY_ENV = "PROMETHEUS"  # a prometheus binary other than the one on PATH (as PROMTOOL for promtool)
RULES = Path(__file__).resolve().parents[2] / "charts" / "scoring-fleet" / "files" / \
    "prometheus-rules.yaml"
JOB = "podMonitor/scoring-system/sf"  # the job name a Prometheus Operator gives the chart's PodMonitor
PR_SET_PDEATHSIG = 1


def find_binary() -> str | None:
    return shutil.which(os.environ.get(BINARY_ENV, "prometheus"))


@dataclass(frozen=True)
class Target:
    """One scoring pod as the chart's PodMonitor makes it a target."""

    address: str  # host:port
    pod: str
    namespace: str
    fleet: str


def config(targets_file: Path, interval_s: float) -> dict:
    """prometheus.yml: one job, its targets from targets_file (file_sd_configs)."""
    interval = f"{interval_s:g}s"
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": interval,
                   "evaluation_interval": interval},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": JOB, "file_sd_configs": [{"files": [str(targets_file)]}]}],
    }


def target_groups(targets: list[Target]) -> list[dict]:
    """The file_sd file's content: every target its own group with its pod's labels."""
    return [{"targets": [t.address], "labels": {"namespace": t.namespace, "pod": t.pod,
                                                "fleet": t.fleet}} for t in targets]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Prometheus:
    """`with Prometheus(binary, folder, targets) as prom:` a running Prometheus; killed on exit."""

    def __init__(self, binary: str, folder: Path, targets: list[Target], interval_s: float = 1.0):
        self.binary, self.folder, self.interval_s = binary, folder, interval_s
        self.config_path, self.log_path = folder / "prometheus.yml", folder / "prometheus.log"
        self.targets_path = folder / "targets.json"
        self.port = free_port(["127.0.0.1"])
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.config_path.write_text(yaml.safe_dump(config(self.targets_path, interval_s),
                                                   sort_keys=False))
        self.set_targets(targets)

    def __enter__(self) -> Prometheus:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [self.binary, f"--config.file={self.config_path}",
                 f"--storage.tsdb.path={self.folder / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        try:
            wait_for(self._ready, f"Prometheus on {self.url}", timeout_s=30)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()  # a test's Prometheus holds nothing worth a clean shutdown
        if self.process:
            self.process.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def set_targets(self, targets: list[Target]) -> None:
        """Replace the targets file at once (a rename: Prometheus never reads half of it); its file
        watch passes the change on, as Kubernetes SD passes on a pod that comes or goes."""
        staged = self.targets_path.with_suffix(".tmp")
        staged.write_text(json.dumps(target_groups(targets)))
        os.replace(staged, self.targets_path)

    def query(self, expr: str, at: float | None = None) -> list[tuple[dict[str, str], float]]:
        """An instant query at `at` (Unix seconds; default now): each sample's labels and value."""
        params = {"query": expr} | ({} if at is None else {"time": f"{at:.3f}"})
        answer = httpx.get(f"{self.url}/api/v1/query", params=params, timeout=5)
        answer.raise_for_status()
        body = answer.json()
        assert body["status"] == "success", body
        return [(s["metric"], float(s["value"][1])) for s in body["data"]["result"]]

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"prometheus exited {self.process.returncode}: {self.log()[-3000:]}")
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False
