"""drift.py: which live fields differ from the built child, and the merge patch that reverts them."""
from __future__ import annotations

import copy

import pytest

from fleet_operator.drift import DEPLOYMENT_OPTIONAL, covers, drift_patch

DESIRED = {
    "metadata": {"name": "x", "labels": {"a": "1"}},
    "spec": {"replicas": 2, "template": {"spec": {
        "containers": [{"name": "server", "image": "img:1",
                        "resources": {"limits": {"cpu": "0.5", "memory": "1Gi"}}}]}}},
}


def live(**changes):
    """A live copy of DESIRED with server-added fields, then `changes` applied by dotted path."""
    obj = {
        "metadata": {"name": "x", "labels": {"a": "1", "other": "y"}, "resourceVersion": "7"},
        "spec": {"replicas": 2, "revisionHistoryLimit": 10, "template": {"spec": {
            "dnsPolicy": "ClusterFirst",
            "containers": [{"name": "server", "image": "img:1", "terminationMessagePath": "/dev/t",
                            "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}}]}}},
        "status": {"replicas": 2},
    }
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = obj
        for key in parents:
            node = node[key]
        node[last] = value
    return obj


@pytest.mark.parametrize("actual,expected", [
    (live(), None),
    (live(spec__replicas=5), {"spec": {"replicas": 2}}),
    (live(metadata__labels={"other": "y"}), {"metadata": {"labels": {"a": "1"}}}),
    (live(spec__template__spec__containers=[{"name": "server", "image": "img:2"}]),
     {"spec": {"template": {"spec": {"containers": DESIRED["spec"]["template"]["spec"]["containers"]}}}}),
    (live(spec__template__spec__containers=[]),
     {"spec": {"template": {"spec": {"containers": DESIRED["spec"]["template"]["spec"]["containers"]}}}}),
], ids=["server-defaults-are-not-drift", "replicas", "label-removed", "image-edited",
        "container-removed"])
def test_drift_patch(actual, expected):
    assert drift_patch(DESIRED, actual) == expected


def test_stale_optional_field_is_removed_with_null():
    actual = live(spec__template__spec__nodeSelector={"old": "pool"})
    patch = drift_patch(DESIRED, actual, DEPLOYMENT_OPTIONAL)
    assert patch == {"spec": {"template": {"spec": {"nodeSelector": None}}}}


def test_optional_field_absent_on_both_sides_is_not_drift():
    assert drift_patch(DESIRED, live(), DEPLOYMENT_OPTIONAL) is None


@pytest.mark.parametrize("desired,actual,path,same", [
    ("0.5", "500m", ("resources", "limits", "cpu"), True),
    ("1Gi", "1073741824", ("resources", "requests", "memory"), True),
    ("1", "2", ("resources", "limits", "cpu"), False),
    ("0.5", "500m", ("env", "value"), False),  # quantity equality only under resources
    ({"a": 1}, {"a": 1, "b": 2}, (), True),
    ([{"a": 1}], [{"a": 1}, {"a": 2}], (), False),
    ([1, 2], [2, 1], (), False),
], ids=["cpu-canonical", "memory-bytes", "cpu-differs", "not-a-resource", "extra-keys-fine",
        "extra-list-item", "order-matters"])
def test_covers(desired, actual, path, same):
    assert covers(desired, actual, path) is same


def test_what_keda_writes_on_the_scaled_object_is_not_drift():
    from fleet_operator.builders import build_scaled_object, scaled_object_params
    from fleet_operator.spec.fleet import parse_fleet
    fleet = parse_fleet("x", "ns", {"model": {"source": "m"}, "image": "i", "autoscaling": {
        "enabled": True, "mode": "keda", "keda": {"prometheusAddress": "http://p:9090"}}})
    desired = build_scaled_object(scaled_object_params(fleet))
    desired["metadata"]["ownerReferences"] = [{"kind": "ScoringFleet", "name": "x", "uid": "u"}]
    actual = copy.deepcopy(desired)
    # KEDA's controller: a finalizer, its label, annotations, the status; the API server's fields.
    actual["metadata"].update(finalizers=["finalizer.keda.sh"], resourceVersion="9", generation=1,
                              annotations={"scaledobject.keda.sh/paused": "false"})
    actual["metadata"]["labels"]["scaledobject.keda.sh/name"] = "x"
    actual["status"] = {"scaleTargetKind": "scoring.fleet.dev/v1alpha1.ScoringFleet",
                        "hpaName": "keda-hpa-x", "conditions": [{"type": "Ready", "status": "True"}]}
    actual["spec"]["triggers"][0]["useCachedMetrics"] = False
    assert drift_patch(desired, actual) is None
    actual["spec"]["maxReplicaCount"] = 50  # a hand edit of a managed field is drift
    assert drift_patch(desired, actual) == {"spec": {"maxReplicaCount": 8}}
