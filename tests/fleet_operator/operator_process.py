"""The real operator as a subprocess against the emulator, and a Cluster to read and act through.

Users act through kubectl (apply, patch, scale...), as they would; reads go over the API.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.server_process import stop
from tests.fleet_operator.crd_schema import ROOT, schema_errors

FLEET = "qwen-scorer"  # examples/minimal.yaml
# A short resync so that drift on unwatched children (Service, PDB) shows within a test's wait.
RESYNC_S = 1.0


class Cluster:
    """Reads over the emulator's API, and kubectl for what users do."""

    def __init__(self, kube_api: Any) -> None:
        self.api = kube_api

    def get(self, api_version: str, kind: str, name: str, ns: str = "default") -> dict | None:
        status, obj = self.api.request("GET", self.api.path_for(api_version, kind, ns, name))
        return obj if status == 200 else None

    def fleet(self, name: str = FLEET) -> dict | None:
        return self.get("scoring.fleet.dev/v1alpha1", "ScoringFleet", name)

    def deployment(self, name: str = FLEET) -> dict | None:
        return self.get("apps/v1", "Deployment", name)

    def container(self, name: str = FLEET) -> dict:
        return self.deployment(name)["spec"]["template"]["spec"]["containers"][0]

    def condition(self, name: str, type_: str) -> dict:
        status = (self.fleet(name) or {}).get("status") or {}
        return next((c for c in status.get("conditions") or () if c["type"] == type_), {})

    def events(self, name: str, reason: str) -> list[dict]:
        _, answer = self.api.request(
            "GET", "/api/v1/namespaces/default/events?fieldSelector=" +
            f"involvedObject.name={name},reason={reason}")
        return answer["items"]

    def kubectl(self, *args: str, **kwargs: Any) -> str:
        return self.api.kubectl(*args, **kwargs).stdout

    def apply(self, doc: dict) -> None:
        assert schema_errors(doc) == [], "the test's own fleet must be schema-valid"
        self.kubectl("apply", "--validate=false", "-f", "-", input=json.dumps(doc))

    def patch_fleet(self, name: str, patch: dict) -> None:
        self.kubectl("patch", "sf", name, "--type=merge", "-p", json.dumps(patch))


@contextlib.contextmanager
def running_operator(kube_api: Any, log_path: Path, *args: str,
                     env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """`python -m fleet_operator --standalone <args>` against the emulator; stopped on exit.

    env: the operator's settings (SCORINGFLEET_*) beyond the short resync.
    """
    env = dict(kube_api.env, SCORINGFLEET_RESYNC_INTERVAL_S=str(RESYNC_S), **(env or {}))
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "fleet_operator", "--standalone", *args],
                                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            stop(proc)
            print(log_path.read_text()[-5000:])  # shown by pytest when the test failed
