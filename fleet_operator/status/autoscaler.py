"""Pure: the status the native autoscaler writes after a decision."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet_operator.autoscaling.history import history_to_status
from fleet_operator.autoscaling.values import Decision
from fleet_operator.clock import format_time
from fleet_operator.status.conditions import set_condition


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
