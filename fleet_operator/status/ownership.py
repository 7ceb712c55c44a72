"""Pure: who owns which status field and condition. The reconciler and the native autoscaler write
.status, each its own (OWNED_FIELDS, OWNED_CONDITIONS); status_patch() refuses a patch that touches
the other writer's."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

Writer = Literal["reconciler", "autoscaler"]


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
