"""The autoscaler's value types: PodSample and GatewayDemand in; PodVerdict, RawResult, Condition and Decision out.

Value types only, with their status (JSON) forms: status.lastDecision is Decision.to_status(). The
maths that fills them is replicas.py's, behavior.py's and decide.py's; what to remember between
decisions is history.py's. Pure: no I/O.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from fleet_operator.autoscaling.history import History
from fleet_operator.clock import format_time

PodStatus = Literal["sample", "missing", "pending", "unready", "ignored"]


STEADY_REASONS = frozenset({"NoChange", "WithinTolerance"})


@dataclass(frozen=True)
class PodSample:
    """One pod as the decision sees it. load is running + waiting sequences, or None when the
    scrape failed or was garbage (error says why); None is never read as zero."""

    name: str
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    ready: bool
    deleting: bool = False  # metadata.deletionTimestamp is set
    load: float | None = None
    scraped_at: datetime | None = None
    error: str = ""


@dataclass(frozen=True)
class GatewayDemand:
    """Requests waiting at the fleet's gateway (scoringfleet_gateway_waiting_requests summed over
    its ready pods), or None when unknown (error says why); unknown is never read as zero."""

    waiting: float | None
    error: str = ""

    def to_status(self) -> dict:
        if self.waiting is None:
            return {"waiting": "unknown", "why": self.error}
        return {"waiting": self.waiting}


@dataclass(frozen=True)
class PodVerdict:
    """How one pod entered the maths: its load, or why not, and what was assumed for it."""

    name: str
    status: PodStatus
    load: float | None
    why: str = ""
    assumed: float | None = None  # the load filled in for a missing/pending pod, if any

    def to_status(self) -> dict:
        out: dict = {"name": self.name, "load": self.load if self.status == "sample" else self.status}
        if self.why:
            out["why"] = self.why
        if self.assumed is not None:
            out["assumed"] = self.assumed
        return out


@dataclass(frozen=True)
class Condition:
    type: str
    status: Literal["True", "False"]
    reason: str
    message: str

    def to_status(self) -> dict:
        return {"type": self.type, "status": self.status, "reason": self.reason, "message": self.message}


@dataclass(frozen=True)
class RawResult:
    """replica_calculator's answer: replicas from the ratio, and why."""

    replicas: int
    reason: str  # ScaleUp | ScaleDown | NoChange | WithinTolerance | DirectionFlip | NoMetrics
    ratio: float | None = None
    corrected_ratio: float | None = None
    verdicts: tuple[PodVerdict, ...] = ()


@dataclass(frozen=True)
class Decision:
    """Every stage of one decision. desired_replicas is what to write to the scale subresource."""

    time: datetime
    current_replicas: int
    desired_replicas: int
    raw: int
    stabilized: int
    rate_limited: int
    clamped: int
    reason: str
    message: str
    pods: tuple[PodVerdict, ...]
    ratio: float | None
    corrected_ratio: float | None
    total_load: float
    target_load_per_replica: float
    degraded: bool
    conditions: tuple[Condition, ...]
    history: History = field(default_factory=History)
    # None: not read (the fleet has no gateway, or minReplicas >= 1: only a fleet that may go to 0 reads it)
    gateway: GatewayDemand | None = None
    pods_to_go: tuple[str, ...] = ()  # on a scale-down, the pods expected to be removed (scale_in.py)

    @property
    def is_rescale(self) -> bool:
        return self.desired_replicas != self.current_replicas

    def is_news(self, last_decision: Mapping | None) -> bool:
        """Worth an Event: a rescale, or a reason or degraded state other than status.lastDecision's.

        NoChange and WithinTolerance both mean "the load fits this size": a load near a boundary
        alternates between them every interval, and an Event for each would bury the ones that
        explain the size.
        """
        last = last_decision or {}
        reasons = {last.get("reason"), self.reason}
        return (self.is_rescale or (len(reasons) > 1 and not reasons <= STEADY_REASONS)
                or last.get("metricsDegraded") != self.degraded)

    def condition(self, type_: str) -> Condition:
        return next(c for c in self.conditions if c.type == type_)

    def to_status(self) -> dict:
        """status.lastDecision: inputs and each step of the maths, JSON-ready."""
        out = {
            "time": format_time(self.time),
            "currentReplicas": self.current_replicas,
            "desiredReplicas": self.desired_replicas,
            "reason": self.reason,
            "message": self.message,
            "targetLoadPerReplica": self.target_load_per_replica,
            "totalLoad": self.total_load,
            "ratio": _round(self.ratio),
            "correctedRatio": _round(self.corrected_ratio),
            "raw": self.raw,
            "stabilized": self.stabilized,
            "rateLimited": self.rate_limited,
            "clamped": self.clamped,
            "metricsDegraded": self.degraded,
            "pods": [v.to_status() for v in self.pods],
            **({"gateway": self.gateway.to_status()} if self.gateway else {}),
        }
        if self.pods_to_go:
            out["podsToGo"] = list(self.pods_to_go)
        return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)
