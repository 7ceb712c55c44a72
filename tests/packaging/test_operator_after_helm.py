"""The path a user takes: `helm install` (CRD, RBAC, operator Deployment), then the real operator runs
with the command line the chart gave it, then a fleet applied afterwards is reconciled.

The operator runs as a subprocess of this test (the emulator has no kubelet to start the chart's pod),
with the rendered Deployment's arguments; only the liveness address moves from 0.0.0.0:8080 to a free
loopback port.
"""
from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bench.server_process import free_port, stop
from tests.kit.waiting import wait_for
from tests.packaging.helm_tool import by_kind

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 15.0


def _operator_command(deployment: dict, liveness_port: int) -> list[str]:
    """The chart's container command and args, run by this interpreter, liveness on loopback."""
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"][:1] == ["python"]
    args = [f"--liveness=http://127.0.0.1:{liveness_port}/healthz"
            if arg.startswith("--liveness=") else arg for arg in container["args"]]
    return [sys.executable, *container["command"][1:], *args]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _env_value(item: dict, namespace: str) -> str:
    """An env entry's value as the kubelet gives it: a literal, or the downward API's namespace or
    pod name (the peering identity)."""
    if "value" in item:
        return item["value"]
    fields = {"metadata.namespace": namespace, "metadata.name": "sf-scoring-fleet-7d9f8-abcde"}
    return fields[item["valueFrom"]["fieldRef"]["fieldPath"]]


@pytest.fixture()
def operator_from_chart(render, kube_api, tmp_path) -> Iterator[str]:
    """Install the chart, start the operator as the chart runs it; yields its liveness URL."""
    (deployment,) = by_kind(render({}), "Deployment")
    port = free_port()
    env = {**kube_api.env, "SCORINGFLEET_RESYNC_INTERVAL_S": "1"}
    for item in deployment["spec"]["template"]["spec"]["containers"][0]["env"]:
        env[item["name"]] = _env_value(item, deployment["metadata"].get("namespace", "default"))
    log = (tmp_path / "operator.log").open("w")
    process = subprocess.Popen(_operator_command(deployment, port), cwd=ROOT, env=env,
                               stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}/healthz"
    finally:
        stop(process)
        log.close()


def _owned_deployments(kube_api, namespace: str, fleet: str) -> list[dict]:
    status, body = kube_api.request("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments")
    assert status == 200, body
    return [d for d in body["items"]
            if any(ref["kind"] == "ScoringFleet" and ref["name"] == fleet
                   for ref in d["metadata"].get("ownerReferences") or [])]


def test_fleet_applied_after_helm_install_is_reconciled(operator_from_chart, kube_api):
    wait_for(lambda: _healthy(operator_from_chart), "the operator's liveness endpoint", WAIT_S)
    # The chart's own sample spec (values.yaml), applied by the user after the install.
    values = yaml.safe_load((ROOT / "charts" / "scoring-fleet" / "values.yaml").read_text())
    kube_api.create({"apiVersion": "scoring.fleet.dev/v1alpha1", "kind": "ScoringFleet",
                     "metadata": {"name": "smollm2-scorer", "namespace": "default"},
                     "spec": values["sampleFleet"]["spec"]})
    (deployment,) = wait_for(lambda: _owned_deployments(kube_api, "default", "smollm2-scorer"),
                              "the fleet's Deployment", WAIT_S)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    # No image in the spec: the operator used the chart's (SCORINGFLEET_DEFAULT_IMAGE).
    assert container["image"] == "scoring-fleet:0.1.0"
    assert wait_for(lambda: kube_api.request(
        "GET", "/apis/scoring.fleet.dev/v1alpha1/namespaces/default/scoringfleets/smollm2-scorer"
    )[1].get("status", {}).get("selector"), "the fleet's status", WAIT_S)
    # With the chart's --peering, the replica made the peering object and says there that it leads.
    peering = kube_api.request("GET", "/apis/kopf.dev/v1/clusterkopfpeerings/sf-scoring-fleet")[1]
    assert peering["metadata"]["annotations"]["scoring.fleet.dev/leader"] == "sf-scoring-fleet-7d9f8-abcde"
    assert "sf-scoring-fleet-7d9f8-abcde" in peering["status"]
