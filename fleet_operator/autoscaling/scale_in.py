"""Scale-in, idlest first: the pod-deletion-cost each pod should carry, and which pods will go.

Before the native autoscaler lowers replicas, tick.py writes these costs to the pods'
`controller.kubernetes.io/pod-deletion-cost`; the ReplicaSet then deletes the lowest-cost ready pods
first (after any that are not ready). Pure: the decision's pod verdicts in, costs and names out.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from fleet_operator.autoscaling.values import Decision, PodVerdict

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
# The API's bound (an int32): pods without a fresh sample are the last a ReplicaSet removes.
MAX_COST = 2**31 - 1
# Pods the ReplicaSet removes before any ready pod whatever their cost (Pending before not ready).
NOT_READY_ORDER = {"pending": 0, "unready": 1}


def deletion_costs(verdicts: Iterable[PodVerdict]) -> dict[str, int]:
    """{pod: cost} for every pod still counted (being deleted or finished: left out).

    A pod with a fresh sample gets its rank by (load, name): 0 for the idlest. Ranks rather than
    loads, so no two sampled pods tie and the ReplicaSet's own tie-breaks (age, name) never choose
    between them. A pod without a fresh sample (missing, pending, unready) gets MAX_COST: its load is
    unknown, so it is never taken for idle.
    """
    counted = [v for v in verdicts if v.status != "ignored"]
    sampled = sorted((v for v in counted if v.status == "sample"), key=lambda v: (v.load, v.name))
    costs = {v.name: MAX_COST for v in counted}
    costs.update({v.name: rank for rank, v in enumerate(sampled)})
    return costs


def pods_expected_to_go(verdicts: Iterable[PodVerdict], desired_replicas: int) -> tuple[str, ...]:
    """The pods a ReplicaSet removes to reach desired_replicas once deletion_costs are set: in its
    order, not-ready pods first (Pending, then unready; by name among them: the ReplicaSet's finer
    ranks are not known here), then the lowest costs. Empty when nothing is surplus."""
    costs = deletion_costs(verdicts)
    status = {v.name: v.status for v in verdicts}

    def rank(name: str) -> tuple[int, int, str]:
        return NOT_READY_ORDER.get(status[name], 2), costs[name], name

    surplus = len(costs) - desired_replicas
    return tuple(sorted(costs, key=rank)[:max(surplus, 0)])


def cost_patches(costs: Mapping[str, int], current: Mapping[str, str | None]) -> dict[str, str]:
    """{pod: annotation value} for the pods whose annotation is not already their cost (current:
    each pod's annotation as read, None when absent). A pod not in `current` is gone: skipped."""
    return {name: str(cost) for name, cost in costs.items()
            if name in current and current[name] != str(cost)}


def with_pods_to_go(decision: Decision) -> Decision:
    """The decision, saying which pods it expects to go when it lowers replicas (message too)."""
    if decision.desired_replicas >= decision.current_replicas:
        return decision
    to_go = pods_expected_to_go(decision.pods, decision.desired_replicas)
    if not to_go:
        return decision
    message = f"{decision.message}; expected to go (idlest first): {', '.join(to_go)}"
    return dataclasses.replace(decision, pods_to_go=to_go, message=message)
