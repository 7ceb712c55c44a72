"""One reconcile path for a ScoringFleet: parse, build, adopt, apply, write status.

Shared by the create/update/resume handlers, the watch on owned Deployments (drift) and the periodic
timer. Level-based: it reads what is there and acts on the difference, so running it twice changes
nothing. Decisions live in spec/builders/drift/status; the API calls in kube; this module only
sequences them, and serialises reconciles of one fleet within the process (FleetLocks).
"""
from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import kopf
import kubernetes.client

from fleet_operator import kube
from fleet_operator.builders import build_children, wants_hpa
from fleet_operator.drift import DEPLOYMENT_OPTIONAL
from fleet_operator.spec import FleetSpec, SpecError, parse_fleet
from fleet_operator.status import fleet_status, status_patch

DEFAULT_IMAGE_ENV = "SCORING_FLEET_DEFAULT_IMAGE"
RESYNC_INTERVAL_ENV = "SCORING_FLEET_RESYNC_INTERVAL_S"
MAX_BACKOFF_S = 60.0


@dataclass(frozen=True)
class OperatorConfig:
    """Operator-wide settings, read once at start-up."""

    default_image: str | None = None  # the operator's own image: used by CPU fleets without spec.image
    # Services, PDBs and HPAs are not watched: every fleet is re-applied this often (drift, misses).
    resync_interval_s: float = 30.0

    def __post_init__(self) -> None:
        if not self.resync_interval_s > 0:
            raise ValueError(f"resync_interval_s must be > 0, got {self.resync_interval_s}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> OperatorConfig:
        """SCORING_FLEET_DEFAULT_IMAGE, SCORING_FLEET_RESYNC_INTERVAL_S (both optional)."""
        interval = environ.get(RESYNC_INTERVAL_ENV)
        return cls(default_image=environ.get(DEFAULT_IMAGE_ENV) or None,
                   resync_interval_s=float(interval) if interval else cls.resync_interval_s)


@dataclass
class FleetLocks:
    """One lock per fleet: handlers of a fleet and of its Deployment may run in parallel threads."""

    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def for_fleet(self, namespace: str, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((namespace, name), threading.Lock())


@dataclass(frozen=True)
class ReconcileResult:
    spec_error: str | None  # the SpecError message when the spec was rejected
    actions: dict[str, str]  # kind -> created | patched | unchanged | deleted


def backoff_s(retry: int) -> float:
    """Delay before retry number `retry` (0-based) of a failed API call: 1, 2, 4 ... 60 s."""
    return min(2.0 ** retry, MAX_BACKOFF_S)


def reconcile_fleet(api: kubernetes.client.ApiClient, namespace: str, name: str,
                    config: OperatorConfig, locks: FleetLocks, now: datetime,
                    uid: str | None = None) -> ReconcileResult | None:
    """Bring the fleet's children and status in line with its spec. Raises kube.ApiError.

    Reads the fleet afresh under its lock (the event that woke us may be older than the last status
    write). None when there is nothing to do: the fleet is gone, being deleted, or (given `uid`) a
    different fleet of the same name.
    """
    with locks.for_fleet(namespace, name):
        body = kube.get_fleet(api, namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp") \
                or (uid is not None and body["metadata"].get("uid") != uid):
            return None
        try:
            fleet = parse_fleet(name, namespace, body.get("spec"), config.default_image)
        except SpecError as e:
            _reject(api, body, str(e), now)
            return ReconcileResult(spec_error=str(e), actions={})
        actions = _apply_children(api, body, fleet)
        deployment = kube.get(api, "apps/v1", "Deployment", namespace, name)
        _write_status(api, body, deployment, None, now, _desired_replicas(fleet))
        changed = [f"{kind} {action}" for kind, action in actions.items() if action != "unchanged"]
        if changed:
            kube.post_event(api, body, "Normal", "Reconciled", ", ".join(changed), now)
        return ReconcileResult(spec_error=None, actions=actions)


def owner_fleet(child: Mapping[str, Any]) -> tuple[str, str] | None:
    """(name, uid) of the ScoringFleet that owns `child`, or None."""
    for ref in child.get("metadata", {}).get("ownerReferences") or ():
        if ref.get("kind") == "ScoringFleet" and ref.get("apiVersion") == kube.FLEET_API_VERSION:
            return ref["name"], ref.get("uid")
    return None


def _apply_children(api: kubernetes.client.ApiClient, body: Mapping[str, Any],
                    fleet: FleetSpec) -> dict[str, str]:
    children = build_children(fleet)
    kopf.adopt(children, owner=body)  # ownerReferences: deleting the fleet deletes them (GC)
    actions = {}
    for child in children:
        optional = DEPLOYMENT_OPTIONAL if child["kind"] == "Deployment" else frozenset()
        actions[child["kind"]], _ = kube.apply(api, child, optional)
    if not wants_hpa(fleet):
        if kube.delete(api, "autoscaling/v2", "HorizontalPodAutoscaler", fleet.namespace,
                       fleet.name):
            actions["HorizontalPodAutoscaler"] = "deleted"
    return actions


def _reject(api: kubernetes.client.ApiClient, body: Mapping[str, Any], message: str,
            now: datetime) -> None:
    """SpecValid=False and one Warning Event per distinct error; the running children stay."""
    meta = body["metadata"]
    deployment = kube.get(api, "apps/v1", "Deployment", meta["namespace"], meta["name"])
    if _write_status(api, body, deployment, message, now):
        kube.post_event(api, body, "Warning", "InvalidSpec", message, now)


def _desired_replicas(fleet: FleetSpec) -> int | None:
    """spec.replicas is the desired size unless the native autoscaler decides (and reports) it."""
    native = fleet.autoscaling.enabled and fleet.autoscaling.mode == "native"
    return None if native else fleet.replicas


def _write_status(api: kubernetes.client.ApiClient, body: Mapping[str, Any],
                  deployment: Mapping[str, Any] | None, spec_error: str | None,
                  now: datetime, desired_replicas: int | None = None) -> bool:
    """Patch the status fields that changed; True if the SpecValid condition changed."""
    meta = body["metadata"]
    current = body.get("status") or {}
    new = fleet_status(current, name=meta["name"], generation=meta.get("generation"),
                       deployment=deployment, spec_error=spec_error, now=now,
                       desired_replicas=desired_replicas)
    patch = status_patch(current, new)
    if patch:
        kube.patch_fleet_status(api, meta["namespace"], meta["name"], patch)
    return _condition(current, "SpecValid") != _condition(new, "SpecValid")


def _condition(status: Mapping[str, Any], type_: str) -> tuple[Any, Any]:
    found = next((c for c in status.get("conditions") or () if c.get("type") == type_), {})
    return found.get("status"), found.get("message")
