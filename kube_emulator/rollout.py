"""Pure decisions of the emulator's rolling update (the Deployment controller with pods on, see
README "Rollouts"): which pods are the current template's, how many to create, which old ones to
delete, and the Deployment status those pods make.

Kubernetes' own rules (pkg/controller/deployment/rolling.go, util.ResolveFenceposts): maxSurge rounds
a percentage up and maxUnavailable down (both 25% by default); both 0 is taken as maxUnavailable 1;
the new ReplicaSet grows while all pods stay within replicas + maxSurge; old pods go, not-ready ones
first, only while the ready pods stay at least replicas - maxUnavailable. ReplicaSets themselves
are not emulated: a pod's `pod-template-hash` label says which template it was made from.
Terminating pods count for nothing (as in a ReplicaSet's status).
"""
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from kube_emulator import pods

HASH_LABEL = 'pod-template-hash'


def template_hash(deployment: dict[str, Any]) -> str:
    """A stable short hash of spec.template: equal templates, equal hashes."""
    template = (deployment.get('spec') or {}).get('template') or {}
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def resolve(value: int | str | None, replicas: int, default: str, round_up: bool) -> int:
    """An IntOrString of the strategy as a pod count (a percentage of replicas)."""
    value = default if value is None else value
    if isinstance(value, int):
        return value
    fraction = int(value.rstrip('%')) * replicas / 100
    return math.ceil(fraction) if round_up else math.floor(fraction)


def fenceposts(deployment: dict[str, Any]) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) as pod counts; both 0 becomes (0, 1), as Kubernetes does."""
    spec = deployment.get('spec') or {}
    rolling = (spec.get('strategy') or {}).get('rollingUpdate') or {}
    replicas = spec.get('replicas', 1)
    surge = resolve(rolling.get('maxSurge'), replicas, '25%', round_up=True)
    unavailable = resolve(rolling.get('maxUnavailable'), replicas, '25%', round_up=False)
    return (surge, 1) if surge == 0 and unavailable == 0 else (surge, unavailable)


@dataclass(frozen=True)
class Step:
    create: int  # new pods of the current template
    delete: tuple[dict[str, Any], ...]  # old pods, first choice first


def step(deployment: dict[str, Any], selected: list[dict[str, Any]]) -> Step:
    """One pass of the rolling update over the Deployment's selected pods."""
    replicas = (deployment.get('spec') or {}).get('replicas', 1)
    surge, unavailable = fenceposts(deployment)
    current = template_hash(deployment)
    live = [p for p in selected if not pods.is_terminating(p)]
    new = [p for p in live if _hash(p) == current]
    old = [p for p in live if _hash(p) != current]
    create = max(0, min(replicas - len(new), replicas + surge - len(live)))
    if not old:
        return Step(create, ())
    min_ready = replicas - unavailable
    new_not_ready = sum(not pods.is_ready(p) for p in new)
    can_go = max(0, len(live) - min_ready - new_not_ready)
    not_ready_old = [p for p in old if not pods.is_ready(p)][:can_go]
    ready = sum(pods.is_ready(p) for p in live)
    ready_old = [p for p in old if pods.is_ready(p)]
    num_ready_old = max(0, min(can_go - len(not_ready_old), ready - min_ready, len(ready_old)))
    by_rank = pods.pods_to_delete(ready_old, len(ready_old) - num_ready_old)
    return Step(create, (*not_ready_old, *by_rank))


def _hash(pod: dict[str, Any]) -> str | None:
    return (pod['metadata'].get('labels') or {}).get(HASH_LABEL)


def pod_for(deployment: dict[str, Any], suffix: str) -> dict[str, Any]:
    """A new Pod of the Deployment's template (Pending, no IP: the test's pod starter runs it),
    owned by the Deployment (there are no ReplicaSets here)."""
    meta = deployment['metadata']
    template = (deployment.get('spec') or {}).get('template') or {}
    current = template_hash(deployment)
    labels = dict((template.get('metadata') or {}).get('labels') or {}, **{HASH_LABEL: current})
    return {
        'apiVersion': 'v1', 'kind': 'Pod',
        'metadata': {
            'name': f"{meta['name']}-{current}-{suffix}", 'namespace': meta.get('namespace', 'default'),
            'labels': labels, 'annotations': dict((template.get('metadata') or {}).get('annotations') or {}),
            'ownerReferences': [{'apiVersion': 'apps/v1', 'kind': 'Deployment', 'name': meta['name'],
                                 'uid': meta['uid'], 'controller': True, 'blockOwnerDeletion': True}],
        },
        'spec': dict(template.get('spec') or {}),
    }


def deployment_status(deployment: dict[str, Any], selected: list[dict[str, Any]]) -> dict[str, Any]:
    """The counts of status from the pods themselves (the conditions are the caller's)."""
    current = template_hash(deployment)
    live = [p for p in selected if not pods.is_terminating(p)]
    ready = sum(pods.is_ready(p) for p in live)
    return {
        'observedGeneration': deployment['metadata'].get('generation', 1),
        'replicas': len(live), 'updatedReplicas': sum(_hash(p) == current for p in live),
        'readyReplicas': ready, 'availableReplicas': ready,
        'unavailableReplicas': max(0, (deployment.get('spec') or {}).get('replicas', 1) - ready),
    }
