"""The replica calculator: pods' samples -> raw replicas from the ratio of mean load to target.

Follows Kubernetes' replica_calculator.go: groupPods sorts each pod into sample / missing / pending /
unready / ignored in one pass (classify_pod); calcPlainMetricReplicas takes the ratio, holds within
tolerance, fills in missing and unready pods conservatively and holds on a direction flip
(raw_replicas). The first stage of decide(); stabilization and rate limits follow in behavior.py.
Pure: no I/O, no clock.
"""
from __future__ import annotations

import math
from datetime import datetime

from fleet_operator.autoscaling.values import PodSample, PodVerdict, RawResult

# Float noise guard: 64 load / 32 target must give 2 pods, not ceil(2.0000000001) = 3.
EPSILON = 1e-9
# A sample older than this many scrape intervals is stale, i.e. missing.
STALE_AFTER_INTERVALS = 2


# ---- group pods (replica_calculator.go's groupPods) ----

def classify_pod(pod: PodSample, now: datetime, scrape_interval_s: float) -> PodVerdict:
    """Sort one pod into sample / missing / pending / unready / ignored, with the reason."""
    if pod.deleting:
        return PodVerdict(pod.name, "ignored", None, "being deleted")
    if pod.phase in ("Failed", "Succeeded"):
        return PodVerdict(pod.name, "ignored", None, f"phase {pod.phase}")
    if pod.phase == "Pending":
        return PodVerdict(pod.name, "pending", None, "Pending")
    if pod.phase != "Running" or not pod.ready:
        # as HPA does for unready pods: their samples describe a server not yet serving
        return PodVerdict(pod.name, "unready", None, f"phase {pod.phase}, ready={pod.ready}")
    problem = _sample_problem(pod, now, scrape_interval_s)
    if problem:
        return PodVerdict(pod.name, "missing", None, problem)
    return PodVerdict(pod.name, "sample", pod.load)


def _sample_problem(pod: PodSample, now: datetime, scrape_interval_s: float) -> str:
    """Why a Running+ready pod's sample can't be used, or "" when it can."""
    if pod.load is None or pod.scraped_at is None:
        return pod.error or "no sample"
    if not math.isfinite(pod.load) or pod.load < 0:
        return f"invalid load {pod.load}"
    age_s = (now - pod.scraped_at).total_seconds()
    if age_s > STALE_AFTER_INTERVALS * scrape_interval_s:
        return f"stale: scraped {age_s:.0f}s ago"
    return ""


# ---- ratio -> raw replicas (replica_calculator.go's calcPlainMetricReplicas) ----

def within_tolerance(ratio: float, tolerance: float) -> bool:
    return abs(1.0 - ratio) <= tolerance + EPSILON


def _ceil(x: float) -> int:
    return math.ceil(x - EPSILON)


def raw_replicas(verdicts: tuple[PodVerdict, ...], current: int, target: float, tolerance: float) -> RawResult:
    """Desired replicas from the ratio of mean load to target, HPA's Pods-metric rules."""
    loads = {v.name: v.load for v in verdicts if v.status == "sample"}
    if not loads:
        return RawResult(current, "NoMetrics", verdicts=verdicts)
    ratio = sum(loads.values()) / len(loads) / target
    missing = [v.name for v in verdicts if v.status == "missing"]
    set_aside = [v.name for v in verdicts if v.status in ("pending", "unready")]
    rebalance = bool(set_aside) and ratio > 1.0
    if not rebalance and not missing:
        if within_tolerance(ratio, tolerance):
            return RawResult(current, "WithinTolerance", ratio, ratio, verdicts)
        return _result(_ceil(ratio * len(loads)), current, ratio, ratio, verdicts)
    # on a scale-down, treat missing pods as at target; on a scale-up, as idle. At exactly 1.0 leave
    # them out, as HPA's resource path does (its Pods path would read them as idle: a scale-down).
    assumed = {name: (target if ratio < 1.0 else 0.0) for name in missing if ratio != 1.0}
    if rebalance:
        # on a scale-up, treat pending/unready pods as idle (they will take load once up)
        assumed.update({name: 0.0 for name in set_aside})
    filled = {**loads, **assumed}
    corrected = sum(filled.values()) / len(filled) / target
    verdicts = tuple(_with_assumed(v, assumed) for v in verdicts)
    if within_tolerance(corrected, tolerance):
        return RawResult(current, "WithinTolerance", ratio, corrected, verdicts)
    if (ratio < 1.0 < corrected) or (ratio > 1.0 > corrected):
        return RawResult(current, "DirectionFlip", ratio, corrected, verdicts)
    replicas = _ceil(corrected * len(filled))
    if (corrected < 1.0 and replicas > current) or (corrected > 1.0 and replicas < current):
        # counting the filled-in pods would move replicas against the ratio's direction
        return RawResult(current, "DirectionFlip", ratio, corrected, verdicts)
    return _result(replicas, current, ratio, corrected, verdicts)


def _with_assumed(v: PodVerdict, assumed: dict[str, float]) -> PodVerdict:
    if v.name not in assumed:
        return v
    return PodVerdict(v.name, v.status, v.load, v.why, assumed[v.name])


def _result(replicas, current, ratio, corrected, verdicts) -> RawResult:
    reason = "ScaleUp" if replicas > current else "ScaleDown" if replicas < current else "NoChange"
    return RawResult(replicas, reason, ratio, corrected, verdicts)
