"""keda mode end to end: the real operator (a subprocess) against the emulator, with and without
KEDA's CRD (tests/vendor/keda, v2.20.2). The test plays KEDA: it writes the fleet's scale
subresource as KEDA's HPA would, and the ScaledObject's Ready condition as KEDA's controller would.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fleet_operator.crd_schema import CRD_PATH, ROOT, load_yaml
from tests.fleet_operator.operator_process import FLEET, RESYNC_S, Cluster, running_operator
from tests.kit.waiting import wait_for

KEDA_CRD = ROOT / "tests" / "vendor" / "keda" / "keda.sh_scaledobjects.yaml"
KEDA = "keda.sh/v1alpha1"
PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"  # the operator's setting (the chart's)


def keda_fleet(**keda: str) -> dict:
    doc = load_yaml(ROOT / "examples" / "minimal.yaml")
    doc["spec"]["autoscaling"] = {"enabled": True, "mode": "keda", "minReplicas": 1,
                                  "maxReplicas": 5, "targetLoadPerReplica": 16}
    if keda:
        doc["spec"]["autoscaling"]["keda"] = keda
    return doc


@pytest.fixture()
def keda_cluster(kube_api: Any, tmp_path: Path) -> Iterator[Cluster]:
    """Both CRDs registered; the operator running with a default Prometheus address."""
    kube_api.apply_file(CRD_PATH)
    kube_api.apply_file(KEDA_CRD)
    with running_operator(kube_api, tmp_path / "operator.log", "-A",
                          env={"SCORINGFLEET_PROMETHEUS_ADDRESS": PROMETHEUS}) as proc:
        yield Cluster(kube_api)
    assert proc.returncode in (0, -15), f"the operator exited with {proc.returncode}"


def scaled_object(cluster: Cluster) -> dict | None:
    return cluster.get(KEDA, "ScaledObject", FLEET)


def test_a_keda_fleet_gets_a_scaled_object_and_keda_owns_its_replicas(keda_cluster, kube_api):
    cluster = keda_cluster
    cluster.apply(keda_fleet())  # only mode and min/max/target: the address is the operator's
    obj = wait_for(lambda: scaled_object(cluster), "the ScaledObject")
    spec = obj["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "scoring.fleet.dev/v1alpha1",
                                      "kind": "ScoringFleet", "name": FLEET}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 5)
    assert spec["fallback"] == {"failureThreshold": 3, "replicas": 1, "behavior": "currentReplicasIfHigher"}
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 300
    [trigger] = spec["triggers"]
    assert (trigger["type"], trigger["metadata"]["serverAddress"]) == ("prometheus", PROMETHEUS)
    assert trigger["metadata"]["query"] == f'scoringfleet:load:sum{{namespace="default",fleet="{FLEET}"}}'
    assert obj["metadata"]["ownerReferences"][0]["name"] == FLEET
    assert cluster.get("autoscaling/v2", "HorizontalPodAutoscaler", FLEET) is None  # KEDA makes one

    # KEDA's HPA scales the fleet through its scale subresource; the Deployment follows.
    start = time.monotonic()
    cluster.kubectl("scale", f"sf/{FLEET}", "--replicas=3")
    wait_for(lambda: (cluster.deployment() or {}).get("spec", {}).get("replicas") == 3, "Deployment at 3")
    # KEDA's controller reports the ScaledObject Ready; the next resync carries it into the fleet.
    kube_api.request("PATCH", kube_api.path_for(KEDA, "ScaledObject", "default", FLEET) + "/status",
                     {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "ScaledObjectReady",
                                                 "message": "ScaledObject is defined correctly"}]}},
                     content_type="application/merge-patch+json")
    ready = wait_for(lambda: cluster.condition(FLEET, "ScaledObjectReady").get("status") == "True"
                     and cluster.condition(FLEET, "ScaledObjectReady"), "ScaledObjectReady=True")
    assert ready["reason"] == "ScaledObjectReady"
    assert "ScaledObjectReady" in cluster.kubectl("describe", f"sf/{FLEET}")
    # The operator never wrote the size: no scale write of its own, spec.replicas as KEDA left it.
    operator_scales = [r for r in kube_api.requests(start, path_regex=r"/scoringfleets/[^/]+/scale")
                       if not r.user_agent.startswith("kubectl")]
    assert operator_scales == [] and cluster.fleet()["spec"]["replicas"] == 3
    assert cluster.fleet()["status"]["desiredReplicas"] == 3

    # Leaving keda mode removes the ScaledObject (and hpa mode brings the operator's HPA).
    cluster.patch_fleet(FLEET, {"spec": {"autoscaling": {"mode": "hpa"}}})
    wait_for(lambda: scaled_object(cluster) is None, "the ScaledObject to be deleted")
    wait_for(lambda: cluster.get("autoscaling/v2", "HorizontalPodAutoscaler", FLEET), "the HPA")
    wait_for(lambda: not cluster.condition(FLEET, "ScaledObjectReady"), "ScaledObjectReady dropped")


def test_without_kedas_crd_a_keda_fleet_reports_keda_not_installed_once(cluster, kube_api, tmp_path):
    cluster.apply(keda_fleet(prometheusAddress=PROMETHEUS))  # the fleet's own address: no default
    ready = wait_for(lambda: cluster.condition(FLEET, "ScaledObjectReady"), "ScaledObjectReady")
    assert (ready["status"], ready["reason"]) == ("False", "KedaNotInstalled")
    [event] = wait_for(lambda: cluster.events(FLEET, "KedaNotInstalled"), "the Warning Event")
    assert event["type"] == "Warning" and "keda.sh/v1alpha1" in event["message"]
    wait_for(lambda: cluster.condition(FLEET, "Ready").get("status") == "True", "the fleet served all the same")
    # The resync (every RESYNC_S here) tries again, and finds KEDA once installed; no hot loop.
    # Reconciles woken by the Deployment's start-up status may still be in flight back to back:
    # count from a quiet moment (no try for RESYNC_S / 2), after which only the resync tries.
    wait_for(lambda: not kube_api.requests(time.monotonic() - RESYNC_S / 2, method="POST",
                                           path_regex="/scaledobjects$"), "the start-up reconciles done")
    start = time.monotonic()

    def tries():
        posts = kube_api.requests(start, method="POST", path_regex="/scaledobjects$")
        return posts if len(posts) >= 2 else None

    posts = wait_for(tries, "two more tries")
    assert posts[1].monotonic_s - posts[0].monotonic_s > RESYNC_S / 2
    assert len(cluster.events(FLEET, "KedaNotInstalled")) == 1
    assert "Traceback" not in (tmp_path / "operator.log").read_text()  # the cluster fixture's log
