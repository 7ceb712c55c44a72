"""The autoscaler's memory: recent recommendations and scale events, and their status form.

Owns what the stabilization windows and rate policies remember between decisions, and its
(de)serialization to status.autoscalerHistory (so an operator restart does not reset the windows).
Pure: no I/O, no clock.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from fleet_operator.clock import format_time, parse_time


@dataclass(frozen=True)
class Recommendation:
    at: datetime
    replicas: int  # the raw (unstabilized) recommendation, as HPA records it


@dataclass(frozen=True)
class ScaleEvent:
    at: datetime
    change: int  # replicas added (in scale_up_events) or removed (in scale_down_events), > 0


@dataclass(frozen=True)
class History:
    """Recommendations within the longest window, scale events within the longest policy period."""

    recommendations: tuple[Recommendation, ...] = ()
    scale_up_events: tuple[ScaleEvent, ...] = ()
    scale_down_events: tuple[ScaleEvent, ...] = ()


def history_to_status(history: History) -> dict:
    """status.autoscalerHistory: so an operator restart does not reset the windows."""
    return {
        "recommendations": [{"time": format_time(r.at), "replicas": r.replicas} for r in history.recommendations],
        "scaleUpEvents": [{"time": format_time(e.at), "change": e.change} for e in history.scale_up_events],
        "scaleDownEvents": [{"time": format_time(e.at), "change": e.change} for e in history.scale_down_events],
    }


def history_from_status(status: Mapping | None) -> History:
    """The inverse of history_to_status. Malformed entries (a hand-edited status) are dropped: a
    lost entry only shortens a window, a crash would stop autoscaling."""
    status = status or {}
    return History(
        recommendations=tuple(_entries(status.get("recommendations"), "replicas", Recommendation)),
        scale_up_events=tuple(_entries(status.get("scaleUpEvents"), "change", ScaleEvent)),
        scale_down_events=tuple(_entries(status.get("scaleDownEvents"), "change", ScaleEvent)),
    )


def _entries(items, key: str, make):
    for item in items if isinstance(items, list) else []:
        try:
            yield make(parse_time(item["time"]), int(item[key]))
        except (TypeError, KeyError, ValueError):
            continue
