"""Pure: the status the reconciler writes, from what one reconcile read and whether the spec was
valid: replicas, readyReplicas, selector, observedGeneration, SpecValid, Ready, the optional
children's conditions, status.gateway and (valid) desiredReplicas."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fleet_operator.names import selector_string
from fleet_operator.status.conditions import ConditionValue, set_condition
from fleet_operator.status.ownership import NATIVE_ONLY_FIELDS, OWNED_CONDITIONS

# An optional child whose create got a 404: the cluster does not serve its API (each also an Event).
KEDA_NOT_INSTALLED = ConditionValue(  # ScaledObjectReady's
    "False", "KedaNotInstalled", "keda mode needs KEDA (>= 2.17): the cluster does not serve keda.sh/v1alpha1 "
    "ScaledObjects, so nothing scales this fleet")
INFERENCE_POOL_NOT_INSTALLED = ConditionValue(  # InferencePoolReady's
    "False", "InferencePoolCrdMissing", "spec.inferencePool needs the Gateway API Inference Extension's CRD: the "
    "cluster does not serve inference.networking.k8s.io/v1 InferencePools (the fleet is served; no Inference "
    "Gateway routes to it)")


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
