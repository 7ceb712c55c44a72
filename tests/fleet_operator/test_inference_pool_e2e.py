"""spec.inferencePool against the emulator: reconcile.py in-process (create, drift repaired, disabled,
the CRD missing), then the real operator (kopf, a subprocess): created, removed with the fleet.
The InferencePool CRD is the Gateway API Inference Extension's v1.6.0 (tests/vendor/inference-extension)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from fleet_operator import kube
from fleet_operator.context import OperatorContext
from fleet_operator.reconcile import reconcile_fleet
from tests.fleet_operator.crd_schema import CRD_PATH, ROOT, load_yaml
from tests.fleet_operator.operator_process import FLEET, Cluster, running_operator
from tests.fleet_operator.test_inference_pool import POOL_CRD
from tests.kit.waiting import wait_for

POOL_API = "inference.networking.k8s.io/v1"
T0 = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)
POOL = {"enabled": True, "endpointPicker": {"name": "qwen-epp"}}


def pool_fleet(pool: dict[str, Any] | None = None) -> dict:
    doc = load_yaml(ROOT / "examples" / "minimal.yaml")
    doc["spec"]["inferencePool"] = pool or POOL
    return doc


@pytest.fixture()
def api(kube_api):
    kube_api.apply_file(CRD_PATH)
    kube_api.create(pool_fleet())
    return kube_api.client()


def reconcile(api, minute=0):
    return reconcile_fleet(OperatorContext(api, clock=lambda: T0 + timedelta(minutes=minute)), "default", FLEET)


def condition(api, type_):
    status = kube.get_fleet(api, "default", FLEET).get("status") or {}
    return next((c for c in status.get("conditions") or () if c["type"] == type_), None)


def pool(api):
    return kube.get(api, POOL_API, "InferencePool", "default", FLEET)


def test_without_the_crd_the_fleet_is_served_and_says_why_once(kube_api, api):
    for minute in range(3):  # create, then two resyncs: no exception, one Warning Event
        result = reconcile(api, minute)
        assert result.spec_error is None and "InferencePool" not in result.actions
    ready = condition(api, "InferencePoolReady")
    assert (ready["status"], ready["reason"]) == ("False", "InferencePoolCrdMissing")
    assert "inference.networking.k8s.io/v1" in ready["message"] and "served" in ready["message"]
    events = "/api/v1/namespaces/default/events?fieldSelector=reason=InferencePoolCrdMissing"
    _, answer = kube_api.request("GET", events)
    [event] = answer["items"]
    assert event["type"] == "Warning" and event["message"] == ready["message"]
    assert kube.get(api, "apps/v1", "Deployment", "default", FLEET) is not None  # served either way
    assert kube.get(api, "v1", "Service", "default", FLEET) is not None
    # the CRD installed later: the next resync creates the pool
    kube_api.apply_file(POOL_CRD)
    assert reconcile(api, 3).actions["InferencePool"] == "created"
    assert condition(api, "InferencePoolReady")["status"] == "True"


def test_the_pool_is_created_owned_repaired_and_removed_when_disabled(kube_api, api):
    kube_api.apply_file(POOL_CRD)
    assert reconcile(api).actions["InferencePool"] == "created"
    live = pool(api)
    assert live["metadata"]["ownerReferences"][0]["name"] == FLEET
    assert live["spec"]["selector"] == {"matchLabels": {"scoring.fleet.dev/fleet": FLEET}}
    assert live["spec"]["endpointPickerRef"]["name"] == "qwen-epp"
    ready = condition(api, "InferencePoolReady")
    assert (ready["status"], ready["reason"]) == ("True", "InferencePoolApplied")
    assert reconcile(api, 1).actions["InferencePool"] == "unchanged"  # level-based: nothing to do twice
    # drift: someone points the pool elsewhere; the next reconcile puts it back
    path = kube.object_path(POOL_API, "InferencePool", "default", FLEET)
    kube_api.request("PATCH", path, {"spec": {"selector": {"matchLabels": {"scoring.fleet.dev/fleet": "other"}},
                                              "targetPorts": [{"number": 9999}]}},
                     content_type="application/merge-patch+json")
    assert reconcile(api, 2).actions["InferencePool"] == "patched"
    assert pool(api)["spec"] == live["spec"]
    # disabled: the pool goes, and so does its condition
    kube_api.request("PATCH", kube.object_path("scoring.fleet.dev/v1alpha1", "ScoringFleet", "default", FLEET),
                     {"spec": {"inferencePool": {"enabled": False}}}, content_type="application/merge-patch+json")
    assert reconcile(api, 3).actions["InferencePool"] == "deleted"
    assert pool(api) is None and condition(api, "InferencePoolReady") is None
    assert kube.get(api, "apps/v1", "Deployment", "default", FLEET) is not None


def test_the_real_operator_creates_the_pool_and_it_goes_with_the_fleet(kube_api: Any, tmp_path: Path):
    kube_api.apply_file(CRD_PATH)
    kube_api.apply_file(POOL_CRD)
    with running_operator(kube_api, tmp_path / "operator.log", "-A") as proc:
        cluster = Cluster(kube_api)
        cluster.apply(pool_fleet())
        live = wait_for(lambda: cluster.get(POOL_API, "InferencePool", FLEET), "the InferencePool")
        assert live["spec"]["targetPorts"] == [{"number": 30000}]
        wait_for(lambda: cluster.condition(FLEET, "InferencePoolReady").get("status") == "True",
                 "InferencePoolReady=True")
        cluster.kubectl("delete", "sf", FLEET, "--wait=false")
        wait_for(lambda: cluster.fleet() is None, "the fleet gone")
        wait_for(lambda: cluster.get(POOL_API, "InferencePool", FLEET) is None, "the pool gone with it")
    assert proc.returncode in (0, -15), f"the operator exited with {proc.returncode}"
    assert "Traceback" not in (tmp_path / "operator.log").read_text()
