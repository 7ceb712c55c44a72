"""status.py: conditions move lastTransitionTime only on transitions; status from the Deployment."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from fleet_operator.autoscaling.decide import decide
from fleet_operator.autoscaling.spec import AutoscalingSpec
from fleet_operator.autoscaling.values import PodSample
from fleet_operator.autoscaling.history import History
from fleet_operator.clock import format_time as rfc3339
from fleet_operator.status import (
    autoscaler_status,
    fleet_status,
    ready_condition,
    set_condition,
    status_patch,
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
    status = fleet_status({}, name="qwen", generation=4, deployment=DEPLOYMENT, spec_error=None,
                          now=T0)
    assert {k: status[k] for k in ("replicas", "readyReplicas", "selector", "observedGeneration")} \
        == {"replicas": 3, "readyReplicas": 2, "selector": "scoring.fleet.dev/fleet=qwen",
            "observedGeneration": 4}
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions == {"SpecValid": ("True", "SpecAccepted"), "Ready": ("False", "ReplicasNotReady")}


def test_fleet_status_with_an_invalid_spec_keeps_reporting_the_running_deployment():
    status = fleet_status({}, name="qwen", generation=5, deployment=DEPLOYMENT,
                          spec_error="spec.image is required", now=T0)
    spec_valid = next(c for c in status["conditions"] if c["type"] == "SpecValid")
    assert (spec_valid["status"], spec_valid["reason"], spec_valid["message"]) == \
        ("False", "InvalidSpec", "spec.image is required")
    assert status["replicas"] == 3


@pytest.mark.parametrize("desired,expected", [(None, 5), (3, 3)], ids=["autoscaler-owns", "given"])
def test_desired_replicas_is_written_only_when_given(desired, expected):
    current = {"desiredReplicas": 5}
    status = fleet_status(current, name="qwen", generation=1, deployment=None, spec_error=None,
                          now=T0, desired_replicas=desired)
    assert {**current, **status}["desiredReplicas"] == expected


def test_fleet_status_leaves_fields_of_other_writers_alone():
    current = {"desiredReplicas": 5, "lastDecision": {"reason": "ScaleUp"}}
    status = fleet_status(current, name="qwen", generation=1, deployment=None, spec_error=None,
                          now=T0)
    assert "desiredReplicas" not in status and "lastDecision" not in status


def test_second_status_at_a_later_time_is_an_empty_patch():
    # Idempotence: recomputing the same state later changes nothing, so nothing is written.
    first = fleet_status({}, name="qwen", generation=1, deployment=DEPLOYMENT, spec_error=None,
                         now=T0)
    again = fleet_status(first, name="qwen", generation=1, deployment=DEPLOYMENT, spec_error=None,
                         now=T1)
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
