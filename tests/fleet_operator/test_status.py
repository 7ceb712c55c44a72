"""status/: conditions move lastTransitionTime only on transitions; status from the Deployment;
which writer owns which field and condition."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from fleet_operator.autoscaling.decide import decide
from fleet_operator.autoscaling.history import History
from fleet_operator.autoscaling.values import PodSample
from fleet_operator.clock import format_time as rfc3339
from fleet_operator.spec.autoscaling import AutoscalingSpec
from fleet_operator.status.autoscaler import autoscaler_status
from fleet_operator.status.conditions import set_condition
from fleet_operator.status.gateway import gateway_status
from fleet_operator.status.ownership import (
    NATIVE_ONLY_FIELDS,
    OWNED_CONDITIONS,
    OWNED_FIELDS,
    OwnershipError,
    owned_conditions,
    owned_fields,
    status_patch,
)
from fleet_operator.status.reconciler import (
    InvalidSpec,
    Observed,
    ValidSpec,
    fleet_status,
    ready_condition,
    scaled_object_condition,
)

T0 = datetime(2026, 11, 29, 18, 0, 0, tzinfo=timezone.utc)
T1 = T0 + timedelta(minutes=5)


def cond(type_, status, reason="R", message="m", at=T0):
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": rfc3339(at)}


@pytest.mark.parametrize("before,status,expected_time", [
    ([], "True", T1),                                   # new condition: now
    ([cond("Ready", "True")], "True", T0),              # same status: time stays
    ([cond("Ready", "False")], "True", T1),             # transition: now
    ([cond("Ready", "True", reason="Old")], "True", T0),  # only reason/message changed: stays
], ids=["new", "unchanged", "transition", "reason-only"])
def test_set_condition_moves_time_only_on_transitions(before, status, expected_time):
    [after] = set_condition(before, "Ready", status, "AllReplicasReady", "ok", T1)
    assert after["lastTransitionTime"] == rfc3339(expected_time)
    assert (after["status"], after["reason"], after["message"]) == (status, "AllReplicasReady", "ok")


def test_set_condition_keeps_other_conditions_and_their_order():
    before = [cond("SpecValid", "True"), cond("Ready", "False"), cond("ScalingLimited", "False")]
    after = set_condition(before, "Ready", "True", "AllReplicasReady", "ok", T1, 7)
    assert [c["type"] for c in after] == ["SpecValid", "Ready", "ScalingLimited"]
    assert after[0] == before[0] and after[2] == before[2]
    assert after[1]["observedGeneration"] == 7
    assert before[1]["status"] == "False"  # the input is not mutated


@pytest.mark.parametrize("desired,ready,expected", [
    (None, 0, ("False", "DeploymentMissing")),
    (0, 0, ("False", "ScaledToZero")),
    (3, 1, ("False", "ReplicasNotReady")),
    (3, 3, ("True", "AllReplicasReady")),
    (2, 3, ("True", "AllReplicasReady")),  # scaling down: surplus ready pods are still ready
], ids=["no-deployment", "zero", "partial", "all", "surplus"])
def test_ready_condition(desired, ready, expected):
    assert ready_condition(desired, ready)[:2] == expected


DEPLOYMENT = {"spec": {"replicas": 3}, "status": {"replicas": 3, "readyReplicas": 2}}


def test_fleet_status_from_the_deployment():
    status = fleet_status({}, Observed("qwen", 4, DEPLOYMENT, T0), ValidSpec())
    assert {k: status[k] for k in ("replicas", "readyReplicas", "selector", "observedGeneration")} \
        == {"replicas": 3, "readyReplicas": 2, "selector": "scoring.fleet.dev/fleet=qwen",
            "observedGeneration": 4}
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions == {"SpecValid": ("True", "SpecAccepted"), "Ready": ("False", "ReplicasNotReady")}


def test_fleet_status_with_an_invalid_spec_keeps_reporting_the_running_deployment():
    status = fleet_status({}, Observed("qwen", 5, DEPLOYMENT, T0), InvalidSpec("spec.image is required"))
    spec_valid = next(c for c in status["conditions"] if c["type"] == "SpecValid")
    assert (spec_valid["status"], spec_valid["reason"], spec_valid["message"]) == \
        ("False", "InvalidSpec", "spec.image is required")
    assert status["replicas"] == 3


@pytest.mark.parametrize("desired,expected", [(None, 5), (3, 3)], ids=["autoscaler-owns", "given"])
def test_desired_replicas_is_written_only_when_given(desired, expected):
    current = {"desiredReplicas": 5}
    status = fleet_status(current, Observed("qwen", 1, None, T0), ValidSpec(desired_replicas=desired))
    assert {**current, **status}["desiredReplicas"] == expected


def test_fleet_status_leaves_fields_of_other_writers_alone():
    current = {"desiredReplicas": 5, "lastDecision": {"reason": "ScaleUp"}}
    status = fleet_status(current, Observed("qwen", 1, None, T0), ValidSpec())
    assert "desiredReplicas" not in status and "lastDecision" not in status


def test_second_status_at_a_later_time_is_an_empty_patch():
    # Idempotence: recomputing the same state later changes nothing, so nothing is written.
    first = fleet_status({}, Observed("qwen", 1, DEPLOYMENT, T0), ValidSpec())
    again = fleet_status(first, Observed("qwen", 1, DEPLOYMENT, T1), ValidSpec())
    assert status_patch("reconciler", first, again, native=False) == {}


def test_status_patch_has_only_changed_keys():
    assert status_patch("autoscaler", {"running": 1, "waiting": 2}, {"running": 1, "waiting": 3, "lastScaleTime": 4},
                        native=True) == {"waiting": 3, "lastScaleTime": 4}


def autoscaled(load: float, current: int):
    pods = [PodSample("p0", "Running", True, load=load, scraped_at=T1)]
    return decide(pods, current, AutoscalingSpec(enabled=True, target_load_per_replica=10), History(), T1)


@pytest.mark.parametrize("load,current,scaled", [(30.0, 1, True), (10.0, 1, False)],
                         ids=["rescale", "no-change"])
def test_autoscaler_status_moves_last_scale_time_only_on_a_rescale(load, current, scaled):
    status = autoscaler_status({}, autoscaled(load, current), running=2.0, waiting=load - 2.0)
    assert ("lastScaleTime" in status) is scaled
    assert (status["running"], status["waiting"]) == (2, round(load - 2))
    assert status["lastDecision"]["time"] == "2026-11-29T18:05:00Z"


def test_autoscaler_status_sets_its_conditions_next_to_the_reconcilers():
    before = {"conditions": [cond("SpecValid", "True"), cond("Ready", "True"),
                             cond("MetricsDegraded", "False")]}
    status = autoscaler_status(before, autoscaled(30.0, 1), 2.0, 28.0, generation=4)
    by_type = {c["type"]: c for c in status["conditions"]}
    assert list(by_type) == ["SpecValid", "Ready", "MetricsDegraded", "MetricsAvailable",
                             "ScalingLimited"]
    assert by_type["SpecValid"] == cond("SpecValid", "True")  # untouched
    assert by_type["MetricsDegraded"]["lastTransitionTime"] == rfc3339(T0)  # no transition
    assert by_type["MetricsAvailable"]["lastTransitionTime"] == rfc3339(T1)
    assert by_type["MetricsAvailable"]["observedGeneration"] == 4


# ---- ownership: which writer owns which status field and condition ----

FULL_BEFORE = {
    "replicas": 1, "readyReplicas": 1, "selector": "x", "observedGeneration": 1,
    "desiredReplicas": 1, "running": 0, "waiting": 0, "lastDecision": {}, "autoscalerHistory": {},
    "conditions": [cond("SpecValid", "True"), cond("Ready", "True"), cond("MetricsAvailable", "True"),
                   cond("MetricsDegraded", "False"), cond("ScalingLimited", "False")],
}


def test_the_writers_share_only_desired_replicas_and_the_conditions_list():
    shared = OWNED_FIELDS["reconciler"] & OWNED_FIELDS["autoscaler"]
    assert shared == {"desiredReplicas", "conditions"}
    assert not OWNED_CONDITIONS["reconciler"] & OWNED_CONDITIONS["autoscaler"]
    # desiredReplicas has one writer per mode
    for native in (True, False):
        assert len([w for w in ("reconciler", "autoscaler")
                    if "desiredReplicas" in owned_fields(w, native)]) == 1


def test_leaving_native_mode_drops_the_autoscalers_fields_and_conditions():
    new = fleet_status(FULL_BEFORE, Observed("qwen", 2, None, T1), ValidSpec(native=False, desired_replicas=3))
    patch = status_patch("reconciler", FULL_BEFORE, new, native=False)
    assert {k: patch[k] for k in ("running", "waiting", "lastDecision", "autoscalerHistory")} == \
        dict.fromkeys(("running", "waiting", "lastDecision", "autoscalerHistory"))
    assert "lastScaleTime" not in patch  # absent already: nothing to remove
    assert [c["type"] for c in patch["conditions"]] == ["SpecValid", "Ready"]
    # native, or an invalid spec (which may be native again once fixed): left alone
    for spec in (ValidSpec(native=True), InvalidSpec("bad")):
        kept = fleet_status(FULL_BEFORE, Observed("qwen", 2, None, T1), spec)
        assert not {"running", "lastDecision"} & set(kept)
        assert len(kept["conditions"]) == 5


def test_the_native_only_fields_and_conditions_have_one_writer_per_mode():
    for native in (True, False):
        for field in NATIVE_ONLY_FIELDS:
            assert len([w for w in ("reconciler", "autoscaler") if field in owned_fields(w, native)]) == 1
        assert not owned_conditions("reconciler", native) & owned_conditions("autoscaler", native)


@pytest.mark.parametrize("native", [True, False], ids=["native", "not-native"])
def test_the_reconciler_writes_only_its_own_fields_and_conditions(native):
    new = fleet_status(FULL_BEFORE, Observed("qwen", 2, None, T1), InvalidSpec("bad"))
    patch = status_patch("reconciler", FULL_BEFORE, new, native)
    assert set(patch) <= owned_fields("reconciler", native)
    changed = {c["type"] for c in patch["conditions"]} - {
        c["type"] for c in FULL_BEFORE["conditions"] if c in patch["conditions"]}
    assert changed == {"SpecValid", "Ready"}


def test_the_autoscaler_writes_only_its_own_fields_and_conditions():
    new = autoscaler_status(FULL_BEFORE, autoscaled(30.0, 1), 2.0, 28.0, generation=2)
    patch = status_patch("autoscaler", FULL_BEFORE, new, native=True)
    assert set(patch) <= owned_fields("autoscaler", True)
    kept = [c for c in patch["conditions"] if c["type"] in OWNED_CONDITIONS["reconciler"]]
    assert kept == FULL_BEFORE["conditions"][:2]


@pytest.mark.parametrize("writer,new,native", [
    ("autoscaler", {"readyReplicas": 3}, True),
    ("autoscaler", {"desiredReplicas": 3}, False),  # not natively autoscaled: spec.replicas decides
    ("reconciler", {"lastDecision": {"reason": "ScaleUp"}}, True),
    ("reconciler", {"desiredReplicas": 3}, True),
    ("autoscaler", {"conditions": [cond("SpecValid", "False")] + FULL_BEFORE["conditions"][1:]}, True),
    ("autoscaler", {"conditions": FULL_BEFORE["conditions"][2:]}, True),  # drops Ready, SpecValid
    ("reconciler", {"conditions": FULL_BEFORE["conditions"][:4]}, True),  # drops ScalingLimited
], ids=["autoscaler-ready", "autoscaler-desired-not-native", "reconciler-last-decision",
        "reconciler-desired-native", "autoscaler-spec-valid", "autoscaler-drops-conditions",
        "reconciler-drops-conditions"])
def test_a_writer_touching_the_others_status_is_refused(writer, new, native):
    with pytest.raises(OwnershipError):
        status_patch(writer, FULL_BEFORE, {**FULL_BEFORE, **new}, native)


def scaled_object(*conditions):
    return {"kind": "ScaledObject", "status": {"conditions": list(conditions)}}


@pytest.mark.parametrize("live, expected", [
    ({"kind": "ScaledObject"}, ("Unknown", "ScaledObjectPending", "KEDA has not reported")),
    (scaled_object({"type": "Ready", "status": "Unknown"}), ("Unknown", "ScaledObjectPending", "")),
    (scaled_object({"type": "Ready", "status": "True", "reason": "ScaledObjectReady",
                    "message": "ScaledObject is defined correctly and is ready for scaling"}),
     ("True", "ScaledObjectReady", "KEDA: ScaledObject is defined correctly")),
    (scaled_object({"type": "Ready", "status": "False", "reason": "ScaledObjectCheckFailed",
                    "message": "no scale subresource"}),
     ("False", "ScaledObjectCheckFailed", "KEDA: no scale subresource")),
    (scaled_object({"type": "Ready", "status": "False"}), ("False", "ScaledObjectNotReady", "KEDA:")),
    (scaled_object({"type": "Ready", "status": "True", "reason": "ScaledObjectReady"},
                   {"type": "Fallback", "status": "True", "message": "At least one trigger is falling back"}),
     ("True", "ScaledObjectReady", "; fallback active: At least one trigger is falling back")),
], ids=["no-status", "ready-unknown", "ready", "not-ready-with-keda-reason", "not-ready-no-reason",
        "fallback-active"])
def test_scaled_object_condition_passes_kedas_ready_through(live, expected):
    status, reason, message = scaled_object_condition(live)
    assert (status, reason) == expected[:2]
    assert expected[2] in message


def test_scaled_object_ready_is_set_in_keda_mode_and_dropped_outside_it():
    keda = fleet_status(None, Observed("qwen", 1, None, T0),
                        ValidSpec(scaled_object=("True", "ScaledObjectReady", "KEDA: ready")))
    assert [c["type"] for c in keda["conditions"]] == ["SpecValid", "Ready", "ScaledObjectReady"]
    assert status_patch("reconciler", None, keda, native=False)  # the reconciler's own condition
    native = fleet_status(keda, Observed("qwen", 2, None, T1), ValidSpec())
    assert [c["type"] for c in native["conditions"]] == ["SpecValid", "Ready"]
    # An invalid spec leaves the ScaledObject running, and what was said of it stays.
    invalid = fleet_status(keda, Observed("qwen", 2, None, T1), InvalidSpec("bad"))
    assert invalid["conditions"][2] == keda["conditions"][2]


def test_status_gateway_is_the_address_and_ready_pods_or_removed():
    assert gateway_status(None, None) is None
    assert gateway_status("http://q-gateway.ns.svc:30080", {"status": {"readyReplicas": 2}}) == \
        {"address": "http://q-gateway.ns.svc:30080", "readyReplicas": 2}
    assert gateway_status("http://q-gateway.ns.svc:30080", None)["readyReplicas"] == 0
    # routing to other fleets too: each with its model, one not found without
    assert gateway_status("http://q-gateway.ns.svc:30080", None, {"q": "qwen", "c": "bge", "r": None})["fleets"] \
        == [{"name": "q", "model": "qwen"}, {"name": "c", "model": "bge"}, {"name": "r"}]
    assert "fleets" not in gateway_status("http://q-gateway.ns.svc:30080", None, {"q": "qwen"})
    before = {"gateway": {"address": "http://q-gateway.ns.svc:30080", "readyReplicas": 1}}
    off = fleet_status(before, Observed("qwen", 1, None, T0), ValidSpec())
    assert status_patch("reconciler", before, off, native=True)["gateway"] is None  # merge-patch removal
    # an invalid spec leaves it, as it leaves the running children
    bad = fleet_status(before, Observed("qwen", 1, None, T0), InvalidSpec("bad"))
    assert "gateway" not in bad


def test_only_the_reconciler_writes_status_gateway():
    assert "gateway" in owned_fields("reconciler", True) and "gateway" not in owned_fields("autoscaler", True)
    with pytest.raises(OwnershipError):
        status_patch("autoscaler", {}, {"gateway": {"address": "x"}}, native=True)
