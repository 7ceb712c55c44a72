"""Pure Pod rules the kubelet and the ReplicaSet controller apply: readiness, termination marks and
which pods a scale-down removes first.

Owns: the Ready/ContainersReady conditions and containerStatuses[].ready as one fact, the fields a
graceful delete sets (deletionTimestamp, deletionGracePeriodSeconds, not ready), and Kubernetes'
ReplicaSet deletion order (controller.ActivePodsWithRanks). No processes, no store: see kubelet.py.
"""
import datetime
from typing import Any

DELETION_COST = 'controller.kubernetes.io/pod-deletion-cost'
DEFAULT_GRACE_S = 30  # the API server's default terminationGracePeriodSeconds
_PHASE_RANK = {'Pending': 0, 'Unknown': 1, 'Running': 2}  # earlier phases are deleted first
_READINESS = ('ContainersReady', 'Ready')


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get('status') or {}).get('conditions') or []
    return any(c.get('type') == 'Ready' and c.get('status') == 'True' for c in conditions)


def is_terminating(pod: dict[str, Any]) -> bool:
    return bool(pod['metadata'].get('deletionTimestamp'))


def with_readiness(pod: dict[str, Any], ready: bool, now: str) -> dict[str, Any]:
    """pod with Ready and ContainersReady set to `ready` (lastTransitionTime moves only on a change)
    and every containerStatuses[].ready alike. A missing condition is added."""
    status = dict(pod.get('status') or {})
    truth = 'True' if ready else 'False'
    conditions = [dict(c) for c in status.get('conditions') or []]
    for kind in _READINESS:
        found = next((c for c in conditions if c.get('type') == kind), None)
        if found is None:
            conditions.append({'type': kind, 'status': truth, 'lastTransitionTime': now})
        elif found.get('status') != truth:
            found.update(status=truth, lastTransitionTime=now)
    status['conditions'] = conditions
    status['containerStatuses'] = [dict(c, ready=ready) for c in status.get('containerStatuses') or []]
    return dict(pod, status=status)


def grace_period_s(pod: dict[str, Any], requested_s: int | None) -> int:
    """The grace period of a delete: DeleteOptions' gracePeriodSeconds, else (None or negative, as
    `kubectl delete --grace-period=-1`) the pod's spec.terminationGracePeriodSeconds, else 30."""
    if requested_s is None or requested_s < 0:
        requested_s = (pod.get('spec') or {}).get('terminationGracePeriodSeconds', DEFAULT_GRACE_S)
    return max(0, int(requested_s))


def marked_terminating(pod: dict[str, Any], now: str, grace_s: int) -> dict[str, Any]:
    """What a graceful delete writes: deletionTimestamp, deletionGracePeriodSeconds, not ready."""
    meta = dict(pod['metadata'], deletionTimestamp=now, deletionGracePeriodSeconds=grace_s)
    return with_readiness(dict(pod, metadata=meta), False, now)


def deletion_cost(pod: dict[str, Any]) -> int:
    """The pod-deletion-cost annotation; missing or not an integer counts as 0 (as Kubernetes)."""
    value = ((pod['metadata'].get('annotations') or {}).get(DELETION_COST) or '0').strip()
    try:
        return int(value)
    except ValueError:
        return 0


def _epoch_s(timestamp: str | None) -> float:
    if not timestamp:
        return 0.0
    parsed = datetime.datetime.strptime(timestamp, '%Y-%m-%dT%H:%M:%SZ')
    return parsed.replace(tzinfo=datetime.UTC).timestamp()


def _ready_since_s(pod: dict[str, Any]) -> float:
    conditions = (pod.get('status') or {}).get('conditions') or []
    ready = next((c for c in conditions if c.get('type') == 'Ready' and c.get('status') == 'True'), None)
    return _epoch_s(ready.get('lastTransitionTime')) if ready else float('inf')


def deletion_rank(pod: dict[str, Any]) -> tuple[Any, ...]:
    """Sort key: the pod a scale-down removes first sorts first (ActivePodsWithRanks' order)."""
    status = pod.get('status') or {}
    restarts = sum(c.get('restartCount', 0) for c in status.get('containerStatuses') or [])
    return (
        bool((pod.get('spec') or {}).get('nodeName')),  # unscheduled first
        _PHASE_RANK.get(status.get('phase'), 1),        # Pending, then Unknown, then Running
        is_ready(pod),                                  # not ready first
        deletion_cost(pod),                             # lower cost first
        -_ready_since_s(pod),                           # ready for less time first
        -restarts,                                      # more restarts first
        -_epoch_s(pod['metadata'].get('creationTimestamp')),  # newer first
    )


def pods_to_delete(pods: list[dict[str, Any]], replicas: int) -> list[dict[str, Any]]:
    """The pods beyond `replicas` that a ReplicaSet scale-down deletes, first choice first.

    Terminating pods do not count. NOTE: ties (timestamps have a 1 s resolution) go to the greater
    name, so pods x-0..x-4 made in order lose x-4 first, as "newer first" would.
    """
    active = sorted((p for p in pods if not is_terminating(p)), key=lambda p: p['metadata']['name'], reverse=True)
    surplus = len(active) - max(0, replicas)
    return sorted(active, key=deletion_rank)[:surplus] if surplus > 0 else []
