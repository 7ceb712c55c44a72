"""Pure decisions of the fake controllers: the Deployment controller's status and the garbage collector.

The Deployment controller pretends every replica is created, updated, ready and available at once, so
`kubectl rollout status` and `helm --wait` pass; it creates no Pods unless pods are on (tests play the kubelet); on a
scale-down the Cluster deletes the surplus pods (pods.pods_to_delete picks them). The
garbage collector picks dependents all of whose owners are gone. The emulator runs both soon after a
write, as real controllers would (a watch sees the user's write first, then the controller's).
With pods on (KubeApi.run_pods), the rolling update and the counts from real pods are rollout.py's.
"""
from typing import Any


def _condition(kind: str, reason: str, message: str, old: list[dict[str, Any]], now: str) -> dict[str, Any]:
    previous = next((c for c in old if c.get('type') == kind), None)
    unchanged = previous is not None and previous.get('status') == 'True' and previous.get('reason') == reason
    return {
        'type': kind, 'status': 'True', 'reason': reason, 'message': message,
        'lastUpdateTime': previous.get('lastUpdateTime', now) if unchanged else now,
        'lastTransitionTime': previous.get('lastTransitionTime', now) if unchanged else now,
    }


def replicas(deployment: dict[str, Any]) -> int:
    """spec.replicas, which defaults to 1."""
    return (deployment.get('spec') or {}).get('replicas', 1)


def deployment_status(deployment: dict[str, Any], now: str) -> dict[str, Any]:
    """The status of a Deployment whose every desired replica is instantly up to date and available.

    spec.replicas defaults to 1; condition times move only when a condition changes.
    """
    desired = replicas(deployment)
    old = (deployment.get('status') or {}).get('conditions') or []
    name = deployment['metadata']['name']
    return {
        'observedGeneration': deployment['metadata'].get('generation', 1),
        'replicas': desired, 'updatedReplicas': desired,
        'readyReplicas': desired, 'availableReplicas': desired,
        'conditions': [
            _condition('Available', 'MinimumReplicasAvailable', 'Deployment has minimum availability.', old, now),
            _condition('Progressing', 'NewReplicaSetAvailable',
                       f'ReplicaSet "{name}" has successfully progressed.', old, now),
        ],
    }


def owner_uids(obj: dict[str, Any]) -> set[str]:
    return {ref['uid'] for ref in (obj.get('metadata') or {}).get('ownerReferences') or [] if ref.get('uid')}


def is_orphaned(obj: dict[str, Any], live_uids: set[str]) -> bool:
    """True if obj has owners and none of them exists any more (the garbage collector deletes it)."""
    owners = owner_uids(obj)
    return bool(owners) and not owners & live_uids
