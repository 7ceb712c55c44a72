"""reconcile.py in keda mode, in-process against the emulator: the ScaledObject created, KEDA's Ready
read back, the ScaledObject removed outside keda mode, and a cluster without KEDA reported once."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from fleet_operator import kube
from fleet_operator.context import OperatorConfig, OperatorContext
from fleet_operator.reconcile import reconcile_fleet
from tests.fleet_operator.crd_schema import CRD_PATH, ROOT, load_yaml

KEDA_CRD = ROOT / "tests" / "vendor" / "keda" / "keda.sh_scaledobjects.yaml"
KEDA = "keda.sh/v1alpha1"
T0 = datetime(2026, 11, 29, 18, 0, tzinfo=timezone.utc)
NAME = "qwen-scorer"
PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"
KEDA_MODE = {"enabled": True, "mode": "keda", "minReplicas": 1, "maxReplicas": 4}


@pytest.fixture()
def api(kube_api):
    kube_api.apply_file(CRD_PATH)
    doc = load_yaml(ROOT / "examples" / "minimal.yaml")
    doc["spec"]["autoscaling"] = KEDA_MODE
    kube_api.create(doc)
    return kube_api.client()


def reconcile(api, minute=0, address=PROMETHEUS):
    ctx = OperatorContext(api, config=OperatorConfig(prometheus_address=address),
                          clock=lambda: T0 + timedelta(minutes=minute))
    return reconcile_fleet(ctx, "default", NAME)


def condition(api, type_):
    status = kube.get_fleet(api, "default", NAME).get("status") or {}
    return next((c for c in status.get("conditions") or () if c["type"] == type_), None)


def events(kube_api, reason):
    _, answer = kube_api.request("GET", f"/api/v1/namespaces/default/events?fieldSelector=reason={reason}")
    return answer["items"]


def test_without_kedas_crd_the_fleet_says_so_once_and_keeps_its_other_children(kube_api, api):
    for minute in range(3):  # create, then two resyncs: no exception, no hot loop, one Event
        result = reconcile(api, minute)
        assert result.spec_error is None and "ScaledObject" not in result.actions
    ready = condition(api, "ScaledObjectReady")
    assert (ready["status"], ready["reason"]) == ("False", "KedaNotInstalled")
    assert "keda.sh/v1alpha1" in ready["message"]
    [event] = events(kube_api, "KedaNotInstalled")
    assert event["type"] == "Warning" and event["message"] == ready["message"]
    assert kube.get(api, "apps/v1", "Deployment", "default", NAME) is not None
    assert kube.get(api, "autoscaling/v2", "HorizontalPodAutoscaler", "default", NAME) is None


def test_kedas_ready_condition_reaches_the_fleet_and_the_scaled_object_goes_outside_keda_mode(kube_api, api):
    kube_api.apply_file(KEDA_CRD)
    assert reconcile(api).actions["ScaledObject"] == "created"
    obj = kube.get(api, KEDA, "ScaledObject", "default", NAME)
    assert obj["spec"]["triggers"][0]["metadata"]["serverAddress"] == PROMETHEUS  # the operator's
    assert obj["metadata"]["ownerReferences"][0]["name"] == NAME
    assert condition(api, "ScaledObjectReady")["status"] == "Unknown"
    # KEDA's controller: finalizer, label, status with Ready. None of it is drift.
    path = kube.object_path(KEDA, "ScaledObject", "default", NAME)
    kube_api.request("PATCH", path, {"metadata": {"finalizers": ["finalizer.keda.sh"],
                                                  "labels": {"scaledobject.keda.sh/name": NAME}}},
                     content_type="application/merge-patch+json")
    kube_api.request("PATCH", path + "/status", {"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "ScaledObjectReady",
         "message": "ScaledObject is defined correctly and is ready for scaling"}]}},
        content_type="application/merge-patch+json")
    assert reconcile(api, 1).actions["ScaledObject"] == "unchanged"
    ready = condition(api, "ScaledObjectReady")
    assert (ready["status"], ready["reason"]) == ("True", "ScaledObjectReady")
    assert events(kube_api, "KedaNotInstalled") == []

    kube_api.kubectl("patch", "sf", NAME, "--type=merge", "-p", '{"spec": {"autoscaling": {"mode": "native"}}}')
    assert reconcile(api, 2).actions["ScaledObject"] == "deleted"
    # The emulator keeps an object with finalizers until they go, as KEDA would remove its own.
    kube_api.request("PATCH", path, {"metadata": {"finalizers": None}}, content_type="application/merge-patch+json")
    assert kube.get(api, KEDA, "ScaledObject", "default", NAME) is None
    assert condition(api, "ScaledObjectReady") is None


def test_a_keda_fleet_with_no_prometheus_address_anywhere_is_an_invalid_spec(kube_api, api):
    result = reconcile(api, address=None)
    assert "keda mode needs a Prometheus address" in result.spec_error
    spec_valid = condition(api, "SpecValid")
    assert (spec_valid["status"], spec_valid["reason"]) == ("False", "InvalidSpec")
    assert "spec.autoscaling.keda.prometheusAddress" in spec_valid["message"]
    assert len(events(kube_api, "InvalidSpec")) == 1


def test_from_hpa_to_keda_mode_the_hpa_goes_before_the_scaled_object_comes(kube_api, api):
    # KEDA's admission webhook refuses a ScaledObject on a target another HPA manages.
    kube_api.apply_file(KEDA_CRD)
    kube_api.kubectl("patch", "sf", NAME, "--type=merge", "-p", '{"spec": {"autoscaling": {"mode": "hpa"}}}')
    assert reconcile(api).actions["HorizontalPodAutoscaler"] == "created"
    kube_api.kubectl("patch", "sf", NAME, "--type=merge", "-p", '{"spec": {"autoscaling": {"mode": "keda"}}}')
    start = time.monotonic()
    actions = reconcile(api, 1).actions
    assert (actions["HorizontalPodAutoscaler"], actions["ScaledObject"]) == ("deleted", "created")
    writes = [(r.method, r.path) for r in kube_api.requests(start) if r.method in ("POST", "DELETE")]
    hpa_deleted = next(i for i, (m, path) in enumerate(writes)
                       if m == "DELETE" and "/horizontalpodautoscalers/" in path)
    created = next(i for i, (m, path) in enumerate(writes) if m == "POST" and path.endswith("/scaledobjects"))
    assert hpa_deleted < created, writes
