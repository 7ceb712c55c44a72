"""Pure: what one condition says, and the one set_condition() for every condition type:
lastTransitionTime moves only when the status value changes."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from fleet_operator.clock import format_time


class ConditionValue(NamedTuple):
    """What one condition says: its status ("True", "False", "Unknown"), CamelCase reason, message."""

    status: str
    reason: str
    message: str


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
