"""Pure: a ScoringFleet's status from what the reconciler or the native autoscaler saw, and who owns what.

Two writers share .status, each with its own fields and conditions (OWNED_FIELDS, OWNED_CONDITIONS);
status_patch() refuses a patch that touches the other writer's. One set_condition() for every
condition type: lastTransitionTime moves only when the status value changes. Times come in as
arguments, never from the clock.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple

from fleet_operator.autoscaling.history import history_to_status
from fleet_operator.autoscaling.values import Decision
from fleet_operator.clock import format_time
from fleet_operator.names import selector_string

Writer = Literal["reconciler", "autoscaler"]


class ConditionValue(NamedTuple):
    """What one condition says: its status ("True", "False", "Unknown"), CamelCase reason, message."""

    status: str
    reason: str
    message: str


# An optional child whose create got a 404: the cluster does not serve its API (each also an Event).
KEDA_NOT_INSTALLED = ConditionValue(  # ScaledObjectReady's
    "False", "KedaNotInstalled", "keda mode needs KEDA (>= 2.17): the cluster does not serve keda.sh/v1alpha1 "
    "ScaledObjects, so nothing scales this fleet")
INFERENCE_POOL_NOT_INSTALLED = ConditionValue(  # InferencePoolReady's
    "False", "InferencePoolCrdMissing", "spec.inferencePool needs the Gateway API Inference Extension's CRD: the "
    "cluster does not serve inference.networking.k8s.io/v1 InferencePools (the fleet is served; no Inference "
    "Gateway routes to it)")


# desiredReplicas belongs to the autoscaler while the fleet is natively autoscaled, else to the
# reconciler (spec.replicas); so do the autoscaler's other fields and conditions, which the
# reconciler drops once the fleet is not native (any more). owned_fields() and owned_conditions()
# apply that: one writer per field and condition in each mode.
OWNED_FIELDS: dict[Writer, frozenset[str]] = {
    "reconciler": frozenset({"replicas", "readyReplicas", "selector", "observedGeneration",
                             "desiredReplicas", "conditions", "gateway"}),
    "autoscaler": frozenset({"desiredReplicas", "running", "waiting", "lastDecision",
                             "autoscalerHistory", "lastScaleTime", "conditions"}),
}
OWNED_CONDITIONS: dict[Writer, frozenset[str]] = {
    # ScaledObjectReady: keda mode; InferencePoolReady: with spec.inferencePool
    "reconciler": frozenset({"SpecValid", "Ready", "ScaledObjectReady", "InferencePoolReady"}),
    "autoscaler": frozenset({"MetricsAvailable", "MetricsDegraded", "ScalingLimited"}),
}


# What only a native fleet has: the reconciler removes these when the fleet leaves native mode.
NATIVE_ONLY_FIELDS = OWNED_FIELDS["autoscaler"] - {"desiredReplicas", "conditions"}


class OwnershipError(AssertionError):
    """A writer's status patch touches a field or condition the other writer owns: a bug."""


def owned_fields(writer: Writer, native: bool) -> frozenset[str]:
    """The status fields `writer` may write, for a fleet natively autoscaled or not."""
    fields = OWNED_FIELDS[writer]
    if writer == "autoscaler":
        return fields if native else fields - {"desiredReplicas"} - NATIVE_ONLY_FIELDS
    return fields - {"desiredReplicas"} if native else fields | NATIVE_ONLY_FIELDS


def owned_conditions(writer: Writer, native: bool) -> frozenset[str]:
    """The condition types `writer` may set or drop: the autoscaler's go to the reconciler (to drop)
    while the fleet is not natively autoscaled."""
    if native:
        return OWNED_CONDITIONS[writer]
    return OWNED_CONDITIONS["reconciler"] | OWNED_CONDITIONS["autoscaler"] if writer == "reconciler" \
        else frozenset()


def set_condition(conditions: Sequence[Mapping[str, Any]] | None, type_: str, status: str,
                  reason: str, message: str, now: datetime,
                  observed_generation: int | None = None) -> list[dict[str, Any]]:
    """A new conditions list with `type_` set; others are kept in order.

    lastTransitionTime is kept when `status` is unchanged (only reason/message move), and set to
    `now` on a transition or when the condition is new.
    """
    old = next((c for c in conditions or () if c.get("type") == type_), None)
    moved = old is None or old.get("status") != status
    condition: dict[str, Any] = {
        "type": type_, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": format_time(now) if moved else old.get("lastTransitionTime", format_time(now)),
    }
    if observed_generation is not None:
        condition["observedGeneration"] = observed_generation
    if old is None:
        return [dict(c) for c in conditions or ()] + [condition]
    # Keep the list's order stable so a status patch only differs where something changed.
    return [condition if c.get("type") == type_ else dict(c) for c in conditions or ()]


def ready_condition(desired: int | None, ready: int) -> ConditionValue:
    """Ready from the Deployment's desired and ready pods."""
    if desired is None:
        return ConditionValue("False", "DeploymentMissing", "the fleet's Deployment does not exist yet")
    if desired == 0:
        return ConditionValue("False", "ScaledToZero", "the fleet has 0 replicas")
    if ready >= desired:
        return ConditionValue("True", "AllReplicasReady", f"{ready}/{desired} replicas ready")
    return ConditionValue("False", "ReplicasNotReady", f"{ready}/{desired} replicas ready")


def scaled_object_condition(scaled_object: Mapping[str, Any]) -> ConditionValue:
    """ScaledObjectReady from keda mode's ScaledObject as just applied (KEDA_NOT_INSTALLED when the
    cluster does not serve keda.sh at all).

    KEDA's own Ready condition, passed through (its reason and message); a ScaledObject KEDA has
    not looked at yet is Unknown.
    """
    conditions = {c.get("type"): c for c in (scaled_object.get("status") or {}).get("conditions") or ()}
    ready = conditions.get("Ready")
    if ready is None or ready.get("status") not in ("True", "False"):
        return ConditionValue("Unknown", "ScaledObjectPending",
                              "KEDA has not reported on the fleet's ScaledObject yet")
    message = f"KEDA: {ready.get('message') or 'Ready is ' + ready['status']}"
    fallback = conditions.get("Fallback") or {}
    if fallback.get("status") == "True":  # reads failing: KEDA holds the size (docs/operator.md)
        message += f"; fallback active: {fallback.get('message') or 'the trigger failed'}"
    default_reason = "ScaledObjectReady" if ready["status"] == "True" else "ScaledObjectNotReady"
    return ConditionValue(ready["status"], ready.get("reason") or default_reason, message)


def inference_pool_condition(pool: Mapping[str, Any]) -> ConditionValue:
    """InferencePoolReady from the fleet's InferencePool as just applied (INFERENCE_POOL_NOT_INSTALLED
    when the cluster does not serve the CRD). The pool is there and selects the fleet's pods: True
    (whether a Gateway routes to it is the HTTPRoute's, reported in the pool's status.parents by the
    gateway)."""
    spec, name = pool.get("spec") or {}, pool["metadata"]["name"]
    ports, epp = [p.get("number") for p in spec.get("targetPorts") or ()], spec.get("endpointPickerRef") or {}
    return ConditionValue("True", "InferencePoolApplied", f"InferencePool {name} selects the fleet's pods on "
                          f"port {ports}; Endpoint Picker {epp.get('name')}:{(epp.get('port') or {}).get('number')}")


@dataclass(frozen=True)
class Observed:
    """What one reconcile read: the fleet's name and generation, its Deployment as last read (None
    if absent), and when (the time of any condition that moves)."""

    name: str
    generation: int | None
    deployment: Mapping[str, Any] | None
    now: datetime


@dataclass(frozen=True)
class ValidSpec:
    """What a valid spec gives the reconciler's status.

    native: natively autoscaled; if not, the autoscaler's fields and conditions are dropped (they
    describe an autoscaler no longer at work). desired_replicas: written when given (the reconciler
    owns it unless native). scaled_object: ScaledObjectReady in keda mode; inference_pool:
    InferencePoolReady with spec.inferencePool (None drops either). gateway: status.gateway
    (gateway_status()); None removes it.
    """

    native: bool = True
    desired_replicas: int | None = None
    scaled_object: ConditionValue | None = None
    inference_pool: ConditionValue | None = None
    gateway: Mapping[str, Any] | None = None

    @property
    def spec_valid(self) -> ConditionValue:
        return ConditionValue("True", "SpecAccepted", "the spec is valid")


@dataclass(frozen=True)
class InvalidSpec:
    """A spec the parser refused, with the SpecError message. It changes only SpecValid (and Ready,
    which follows the Deployment): the children stay, and so do desiredReplicas, status.gateway,
    what was said of the ScaledObject, and the autoscaler's fields and conditions."""

    error: str

    @property
    def spec_valid(self) -> ConditionValue:
        return ConditionValue("False", "InvalidSpec", self.error)


def fleet_status(current: Mapping[str, Any] | None, observed: Observed,
                 spec: ValidSpec | InvalidSpec) -> dict[str, Any]:
    """The status fields the reconciler owns, merged over `current` (the fleet's status)."""
    current = current or {}
    deployment, now, generation = observed.deployment, observed.now, observed.generation
    dep_status = (deployment or {}).get("status") or {}
    desired = ((deployment or {}).get("spec") or {}).get("replicas") if deployment is not None else None
    ready = int(dep_status.get("readyReplicas") or 0)
    conditions = set_condition(current.get("conditions"), "SpecValid", *spec.spec_valid, now, generation)
    conditions = set_condition(conditions, "Ready", *ready_condition(desired, ready), now, generation)
    status: dict[str, Any] = {
        "replicas": int(dep_status.get("replicas") or 0),
        "readyReplicas": ready,
        "selector": selector_string(observed.name),
        "conditions": conditions,
    }
    if generation is not None:
        status["observedGeneration"] = generation
    if isinstance(spec, ValidSpec):
        status.update(_valid_spec_fields(conditions, spec, observed))
    return status


def _valid_spec_fields(conditions: list[dict[str, Any]], spec: ValidSpec,
                       observed: Observed) -> dict[str, Any]:
    """What only a valid spec writes: ScaledObjectReady, InferencePoolReady, status.gateway,
    desiredReplicas, and (not native) the autoscaler's fields and conditions dropped."""
    for type_, value in (("ScaledObjectReady", spec.scaled_object), ("InferencePoolReady", spec.inference_pool)):
        conditions = _child_condition(conditions, type_, value, observed.now, observed.generation)
    fields: dict[str, Any] = {"gateway": spec.gateway}
    if spec.desired_replicas is not None:
        fields["desiredReplicas"] = spec.desired_replicas
    if not spec.native:
        conditions = [c for c in conditions if c.get("type") not in OWNED_CONDITIONS["autoscaler"]]
        fields.update(dict.fromkeys(NATIVE_ONLY_FIELDS))  # merge patch: null removes the field
    return {**fields, "conditions": conditions}


def _child_condition(conditions: list[dict[str, Any]], type_: str, value: ConditionValue | None,
                     now: datetime, generation: int | None) -> list[dict[str, Any]]:
    if value is None:  # the fleet has no such child (any more): nothing to report
        return [c for c in conditions if c.get("type") != type_]
    return set_condition(conditions, type_, *value, now, generation)


def autoscaler_status(current: Mapping[str, Any] | None, decision: Decision, running: float,
                      waiting: float, generation: int | None = None) -> dict[str, Any]:
    """The status fields the native autoscaler owns, after `decision`, merged over `current`.

    running / waiting are the sequences summed over the pods that answered the scrape (the printer
    columns). lastScaleTime moves only when the decision rescales; the conditions of the decision
    are set with its time, the reconciler's (SpecValid, Ready) are kept.
    """
    conditions = (current or {}).get("conditions")
    for c in decision.conditions:
        conditions = set_condition(conditions, c.type, c.status, c.reason, c.message, decision.time,
                                   generation)
    status: dict[str, Any] = {
        "desiredReplicas": decision.desired_replicas,
        "running": round(running),
        "waiting": round(waiting),
        "lastDecision": decision.to_status(),
        "autoscalerHistory": history_to_status(decision.history),
        "conditions": conditions,
    }
    if decision.is_rescale:
        status["lastScaleTime"] = format_time(decision.time)
    return status


def status_patch(writer: Writer, current: Mapping[str, Any] | None, new: Mapping[str, Any],
                 native: bool) -> dict[str, Any]:
    """The keys of `new` whose values differ from `current`: empty when nothing changed.

    Raises OwnershipError when the patch would write a field `writer` does not own, or change (or
    drop) a condition of the other writer's: merge patches replace the conditions list whole.
    """
    current = current or {}
    patch = {k: v for k, v in new.items() if current.get(k) != v}
    foreign = set(patch) - owned_fields(writer, native)
    if foreign:
        raise OwnershipError(f"the {writer} may not write status {', '.join(sorted(foreign))}")
    if "conditions" in patch:
        _check_conditions(owned_conditions(writer, native), writer, current.get("conditions"),
                          patch["conditions"])
    return patch


def _check_conditions(owned: frozenset[str], writer: Writer, old: Sequence[Mapping[str, Any]] | None,
                      new: Sequence[Mapping[str, Any]]) -> None:
    """The other writer's conditions must come through unchanged."""
    def others(conditions):
        return [dict(c) for c in conditions or () if c.get("type") not in owned]
    if others(old) != others(new):
        raise OwnershipError(f"the {writer} may not change another writer's conditions")
