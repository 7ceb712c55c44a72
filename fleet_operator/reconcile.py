"""One reconcile path for a ScoringFleet: read and parse once, build, adopt, apply, write status.

Shared by the create/update/resume handlers, the watch on owned Deployments (drift) and the periodic
timer. Level-based: it reads what is there and acts on the difference, so running it twice changes
nothing. Decisions live in spec/builders/drift/status; the API calls in kube; this module only
sequences them, and serialises reconciles of one fleet within the process (FleetLocks).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import kopf

from fleet_operator import kube, names
from fleet_operator.builders import build_children, gateway_address, unwanted_children
from fleet_operator.context import OperatorContext
from fleet_operator.drift import DEPLOYMENT_OPTIONAL
from fleet_operator.spec.fleet import FleetSpec, SpecError, parse_fleet
from fleet_operator.spec.model import served_names
from fleet_operator.status.conditions import ConditionValue
from fleet_operator.status.gateway import gateway_status
from fleet_operator.status.ownership import status_patch
from fleet_operator.status.reconciler import (
    INFERENCE_POOL_NOT_INSTALLED,
    KEDA_NOT_INSTALLED,
    InvalidSpec,
    Observed,
    ValidSpec,
    fleet_status,
    inference_pool_condition,
    scaled_object_condition,
)

# Children of an API the cluster may not serve (a CRD of KEDA's, of the Inference Extension's): the
# condition that reports each, how it reads one as applied, and what it says when a create gets a 404.
OPTIONAL_CHILDREN = {"ScaledObject": ("ScaledObjectReady", scaled_object_condition, KEDA_NOT_INSTALLED),
                     "InferencePool": ("InferencePoolReady", inference_pool_condition, INFERENCE_POOL_NOT_INSTALLED)}
NOT_INSTALLED = (KEDA_NOT_INSTALLED, INFERENCE_POOL_NOT_INSTALLED)


@dataclass(frozen=True)
class ReconcileResult:
    spec_error: str | None  # the SpecError message when the spec was rejected
    actions: dict[str, str]  # kind -> created | patched | unchanged | deleted


def reconcile_fleet(ctx: OperatorContext, namespace: str, name: str,
                    uid: str | None = None) -> ReconcileResult | None:
    """Bring the fleet's children and status in line with its spec. Raises kube.ApiError.

    Reads the fleet afresh under its lock (the event that woke us may be older than the last status
    write). None when there is nothing to do: the fleet is gone, being deleted, or (given `uid`) a
    different fleet of the same name.
    """
    with ctx.locks.for_fleet(namespace, name):
        now = ctx.clock()
        body = kube.get_fleet(ctx.api, namespace, name)
        if not kube.is_live_fleet(body, uid):
            return None
        try:
            fleet = parse_fleet(name, namespace, body.get("spec"), ctx.config)
        except SpecError as e:
            if "SpecValid" in _write_status(ctx, body, now, InvalidSpec(str(e))):
                kube.post_event(ctx.api, body, "Warning", "InvalidSpec", str(e), now)
            return ReconcileResult(spec_error=str(e), actions={})
        fleet = _with_fleet_models(ctx, fleet)
        actions, optional = _apply_children(ctx, body, fleet)
        native = fleet.autoscaling.is_native
        # spec.replicas is the desired size unless the native autoscaler decides (and reports) it
        valid = ValidSpec(native=native, desired_replicas=None if native else fleet.replicas,
                          scaled_object=optional.get("ScaledObjectReady"),
                          inference_pool=optional.get("InferencePoolReady"), gateway=_gateway_status(ctx, fleet))
        moved = _write_status(ctx, body, now, valid)
        for type_, condition in optional.items():  # one Warning per move into "not installed"
            if condition in NOT_INSTALLED and type_ in moved:
                kube.post_event(ctx.api, body, "Warning", condition.reason, condition.message, now)
        changed = [f"{kind} {action}" for kind, action in actions.items() if action != "unchanged"]
        if changed:
            kube.post_event(ctx.api, body, "Normal", "Reconciled", ", ".join(changed), now)
        return ReconcileResult(spec_error=None, actions=actions)


def owner_fleet(child: Mapping[str, Any]) -> tuple[str, str] | None:
    """(name, uid) of the ScoringFleet that owns `child`, or None."""
    for ref in child.get("metadata", {}).get("ownerReferences") or ():
        if ref.get("kind") == names.KIND and ref.get("apiVersion") == names.API_VERSION:
            return ref["name"], ref.get("uid")
    return None


def _apply_children(ctx: OperatorContext, body: Mapping[str, Any],
                    fleet: FleetSpec) -> tuple[dict[str, str], dict[str, ConditionValue]]:
    """Delete the children not wanted, apply every child: (actions, the optional children's
    conditions by type: ScaledObjectReady, InferencePoolReady, for those the fleet has)."""
    children = build_children(fleet)
    kopf.adopt(children, owner=body)  # ownerReferences: deleting the fleet deletes them (GC)
    actions: dict[str, str] = {}
    optional: dict[str, ConditionValue] = {}
    # Deletes first: KEDA's admission webhook refuses a ScaledObject on a target another HPA manages.
    for api_version, kind, child_name in unwanted_children(fleet):
        if _delete_owned(ctx, body, api_version, kind, child_name):
            actions[_action_key(kind, child_name, fleet)] = "deleted"
    for child in children:
        if child["kind"] in OPTIONAL_CHILDREN:
            type_, condition_of, not_installed = OPTIONAL_CHILDREN[child["kind"]]
            optional[type_] = _apply_optional(ctx, child, actions, condition_of, not_installed)
            continue
        unmanaged = DEPLOYMENT_OPTIONAL if child["kind"] == "Deployment" else frozenset()
        actions[_action_key(child["kind"], child["metadata"]["name"], fleet)], _ = \
            kube.apply(ctx.api, child, unmanaged)
    return actions, optional


def _delete_owned(ctx: OperatorContext, body: Mapping[str, Any], api_version: str, kind: str,
                  child_name: str) -> bool:
    """Delete the named child only if this fleet owns it: True if deleted.

    Names are not ownership: fleet `foo`'s `foo-gateway` may be fleet `foo-gateway`'s own
    Deployment. A 404 (absent, or keda.sh not served at all) is "nothing to delete"; the uid
    precondition keeps an object recreated between the GET and the DELETE.
    """
    namespace = body["metadata"]["namespace"]
    child = kube.get(ctx.api, api_version, kind, namespace, child_name)
    if child is None or (owner_fleet(child) or (None, None))[1] != body["metadata"].get("uid"):
        return False
    return kube.delete(ctx.api, api_version, kind, namespace, child_name, uid=child["metadata"]["uid"])


def _apply_optional(ctx: OperatorContext, child: Mapping[str, Any], actions: dict[str, str],
                    condition_of: Callable[[Mapping[str, Any]], ConditionValue],
                    not_installed: ConditionValue) -> ConditionValue:
    """Apply a child of an API the cluster may not serve (keda mode's ScaledObject, the
    InferencePool) and say what its condition reports (for the ScaledObject, KEDA's Ready).

    A 404 on the create means the cluster does not serve that API (KEDA or the Inference Extension
    is not installed; the fleet's namespace exists): reported, not raised, so no hot retry loop; the
    resync timer tries again, and finds it once it is installed. The fleet is served either way.
    """
    try:
        actions[child["kind"]], live = kube.apply(ctx.api, child)
    except kube.ApiError as e:
        if e.status != 404:
            raise
        return not_installed
    return condition_of(live)


def _with_fleet_models(ctx: OperatorContext, fleet: FleetSpec) -> FleetSpec:
    """The fleet, with the names each of spec.gateway.fleets serves, read from its ScoringFleet now.

    A fleet listed before it exists is routed without a name until it does (the resync timer reads
    again), and a renamed model reaches the gateway's args at the next resync.
    """
    models = {}
    for other in fleet.gateway.fleets:
        body = kube.get_fleet(ctx.api, fleet.namespace, other)
        if kube.is_live_fleet(body):
            models[other] = served_names(other, (body.get("spec") or {}).get("model") or {})
    return replace(fleet, gateway=replace(fleet.gateway, fleet_models=models))


def _gateway_status(ctx: OperatorContext, fleet: FleetSpec) -> dict[str, Any] | None:
    if not fleet.gateway.enabled:
        return None
    deployment = kube.get(ctx.api, "apps/v1", "Deployment", fleet.namespace,
                          names.gateway_name(fleet.name))
    # each fleet with the name its pods report (a listed fleet not found: None)
    served = {fleet.name: fleet.model.served_name}
    served |= {other: next(iter(fleet.gateway.fleet_models.get(other, ())), None) for other in fleet.gateway.fleets}
    return gateway_status(gateway_address(fleet), deployment, served)


def _action_key(kind: str, child_name: str, fleet: FleetSpec) -> str:
    """"Deployment" for the fleet's own children, "Deployment x-gateway" for the gateway's."""
    return kind if child_name == fleet.name else f"{kind} {child_name}"


def _write_status(ctx: OperatorContext, body: Mapping[str, Any], now: datetime,
                  spec: ValidSpec | InvalidSpec) -> set[str]:
    """Patch the reconciler's status fields that changed; the condition types whose status, reason
    or message changed. An invalid spec leaves desiredReplicas as it was, and the running children
    stay."""
    meta = body["metadata"]
    deployment = kube.get(ctx.api, "apps/v1", "Deployment", meta["namespace"], meta["name"])
    # observedGeneration: the generation this reconcile parsed, even if a retry reads a newer one
    observed = Observed(meta["name"], meta.get("generation"), deployment, now)
    native = isinstance(spec, ValidSpec) and spec.native

    def make_patch(fleet: Mapping[str, Any]) -> dict[str, Any]:
        current = fleet.get("status") or {}
        return status_patch("reconciler", current, fleet_status(current, observed, spec), native)

    written = kube.update_fleet_status(ctx.api, body, make_patch)
    if written is None:
        return set()
    before, patch = written
    status = before.get("status") or {}
    old, new = _conditions(status), _conditions({**status, **patch})
    return {t for t in old.keys() | new.keys() if old.get(t) != new.get(t)}


def _conditions(status: Mapping[str, Any]) -> dict[str, tuple[Any, Any, Any]]:
    return {c.get("type"): (c.get("status"), c.get("reason"), c.get("message"))
            for c in status.get("conditions") or ()}
