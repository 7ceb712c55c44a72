"""The autoscaling part of a ScoringFleet's spec, as frozen values.

Shared by spec.py (which parses the custom resource into these) and autoscaler.py (which decides from
them). Field names follow Kubernetes' autoscaling/v2 HPA behavior types; units are in the names.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

PolicyType = Literal["Pods", "Percent"]
SelectPolicy = Literal["Max", "Min", "Disabled"]
AutoscalingMode = Literal["native", "hpa"]


@dataclass(frozen=True)
class ScalingPolicy:
    """At most `value` pods (or `value` percent of the replicas) changed within `period_s`."""

    type: PolicyType
    value: int
    period_s: int


@dataclass(frozen=True)
class ScalingRules:
    """One direction's behavior: a stabilization window and rate policies (HPAScalingRules)."""

    stabilization_window_s: int
    policies: tuple[ScalingPolicy, ...]
    select_policy: SelectPolicy = "Max"


DEFAULT_SCALE_UP = ScalingRules(
    stabilization_window_s=0,
    policies=(ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15)),
)
DEFAULT_SCALE_DOWN = ScalingRules(
    stabilization_window_s=300,
    policies=(ScalingPolicy("Percent", 100, 15),),
)


@dataclass(frozen=True)
class AutoscalingSpec:
    """spec.autoscaling of a ScoringFleet, defaults applied.

    target_load_per_replica counts running + waiting sequences per pod. A pod without a fresh
    sample is "missing"; when more than max_missing_fraction of the pods that should report are
    missing, the fleet does not scale down (MetricsDegraded). The default 0 means any missing pod
    blocks scale-down: no data is never read as "no load".
    """

    enabled: bool = False
    mode: AutoscalingMode = "native"
    min_replicas: int = 1
    max_replicas: int = 8
    target_load_per_replica: float = 32.0
    scrape_interval_s: float = 5.0
    tolerance: float = 0.1
    max_missing_fraction: float = 0.0
    scale_up: ScalingRules = field(default=DEFAULT_SCALE_UP)
    scale_down: ScalingRules = field(default=DEFAULT_SCALE_DOWN)
