"""Two (or more) real operator replicas with kopf peering against the emulator, as the chart runs
them: `python -m fleet_operator --peering=NAME --all-namespaces --liveness=...` (CHART_ARGS, which
tests/packaging/test_helm_install.py checks against the rendered chart), each with its POD_ID.

Each replica's own writes carry its identity in the User-Agent (peering.GatedApiClient), so the
emulator's request log tells which replica wrote what.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.server_process import stop
from tests.fleet_operator.crd_schema import CRD_PATH, ROOT
from tests.fleet_operator.loopback import free_port
from tests.fleet_operator.operator_process import RESYNC_S

PEERING = "scoring-fleet"
PEERING_CRDS = ROOT / "charts" / "scoring-fleet" / "files" / "kopf-peering.crd.yaml"
PEERING_PATH = f"/apis/kopf.dev/v1/clusterkopfpeerings/{PEERING}"
# The chart's arguments (a release named scoring-fleet, all namespaces), less the liveness port.
CHART_ARGS = [f"--peering={PEERING}", "--all-namespaces"]
# Short, so that the tests are: kopf's keep-alive is then every second, our gate's poll 0.5 s.
LIFETIME_S = 3
READS = ("GET",)


@dataclass
class Replica:
    identity: str
    proc: subprocess.Popen
    log_path: Path
    health_port: int

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def health(self) -> tuple[int, dict]:
        """/healthz: kopf's liveness answer, with the probes' results (ours: `leading`)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as r:
                return r.status, json.loads(r.read() or b"{}")
        except OSError:
            return 0, {}

    def writes(self, kube_api: Any, since: float) -> list[Any]:
        """Every request but a read that this replica's API client sent since `since` (monotonic)."""
        return [r for r in kube_api.requests(since)
                if r.user_agent == f"scoring-fleet-operator/{self.identity}" and r.method not in READS]


def prepare(kube_api: Any) -> None:
    """The chart's CRDs: ScoringFleet's and kopf's peering ones (the first replica makes the
    ClusterKopfPeering)."""
    kube_api.apply_file(CRD_PATH)
    kube_api.apply_file(PEERING_CRDS)


def start_replica(kube_api: Any, tmp_path: Path, identity: str, lifetime_s: int = LIFETIME_S) -> Replica:
    port = free_port(["127.0.0.1"])
    env = dict(kube_api.env, SCORINGFLEET_RESYNC_INTERVAL_S=str(RESYNC_S), POD_ID=identity,
               SCORINGFLEET_PEERING_LIFETIME_S=str(lifetime_s))
    log_path = tmp_path / f"{identity}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fleet_operator", *CHART_ARGS,
             f"--liveness=http://127.0.0.1:{port}/healthz"],
            env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    return Replica(identity, proc, log_path, port)


def stop_replicas(replicas: list[Replica]) -> None:
    for replica in replicas:
        stop(replica.proc)
        print(f"--- {replica.identity}\n{replica.log()[-4000:]}")  # shown when the test failed


def leader(kube_api: Any) -> str | None:
    """Who the peering object says leads (the annotation the leader writes on taking over)."""
    status, body = kube_api.request("GET", PEERING_PATH)
    return ((body.get("metadata") or {}).get("annotations") or {}).get("scoring.fleet.dev/leader") \
        if status == 200 else None


def scale_writes(kube_api: Any, since: float, fleet: str) -> list[Any]:
    return [r for r in kube_api.requests(since, method="PATCH", path_regex=f"/scoringfleets/{fleet}/scale")
            if r.user_agent.startswith("scoring-fleet-operator/")]


def monotonic() -> float:
    return time.monotonic()
