"""The native autoscaling decision: pods' samples + spec + history + now -> Decision. Pure: no I/O, no clock.

Follows Kubernetes HPA v2: replica_calculator.go (group pods, ratio, tolerance, missing and unready
pods filled conservatively, direction-flip hold) and horizontal.go (stabilization windows, rate
policies, min/max clamp). Two guards of our own run last: no scale-down while too many samples are
missing (MetricsDegraded), no scale-up while pods are Pending (ScalingLimited). Value types live in
decision.py, the windows and rate policies in behavior.py, the history in history.py; scraping is
scraper.py's job; writing the scale subresource, status and Events is autoscale.py's.
"""
from __future__ import annotations

import math
from datetime import datetime

from fleet_operator.autoscaling_spec import AutoscalingSpec
from fleet_operator.behavior import limit, record_recommendation, record_scale_events, stabilize
from fleet_operator.decision import Condition, Decision, PodSample, PodVerdict, RawResult
from fleet_operator.history import History

# Float noise guard: 64 load / 32 target must give 2 pods, not ceil(2.0000000001) = 3.
EPSILON = 1e-9
# A sample older than this many scrape intervals is stale, i.e. missing.
STALE_AFTER_INTERVALS = 2


# ---- 1. group pods (replica_calculator.go's groupPods) ----

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


# ---- 2. ratio -> raw replicas (replica_calculator.go's calcPlainMetricReplicas) ----

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


# ---- 5. our guards, conditions, and the whole decision ----

def metrics_degraded(verdicts: tuple[PodVerdict, ...], max_missing_fraction: float) -> tuple[bool, str]:
    """True when more than the allowed fraction of the pods that should report have no fresh sample."""
    should_report = [v for v in verdicts if v.status in ("sample", "missing")]
    missing = [v for v in should_report if v.status == "missing"]
    if not missing:
        return False, f"all {len(should_report)} ready pods reported fresh samples"
    names = ", ".join(f"{v.name} ({v.why})" for v in missing)
    text = f"{len(missing)} of {len(should_report)} ready pods have no fresh sample: {names}"
    if len(missing) / len(should_report) > max_missing_fraction:
        return True, text + "; scale-down is blocked"
    return False, text + f"; within maxMissingFraction {max_missing_fraction}"


def guard(clamped: int, current: int, degraded: bool, pending: list[str]) -> tuple[int, str]:
    """Never scale down on degraded metrics; never add pods while earlier ones are Pending."""
    if degraded and clamped < current:
        return current, "MetricsDegraded"
    if pending and clamped > current:
        # earlier scale-ups still wait for capacity: more pods would queue behind them (AIBrix 2->4->8->16)
        return current, "PendingPods"
    return clamped, ""


def _bound(current: int, spec: AutoscalingSpec) -> tuple[int, str] | None:
    """HPA's checks before any metric: paused at 0, or a size outside [min, max]."""
    if current == 0:
        return 0, "ScalingDisabled"
    if current > spec.max_replicas:
        return spec.max_replicas, "TooManyReplicas"
    if current < spec.min_replicas:
        return spec.min_replicas, "TooFewReplicas"
    return None


LIMITED_REASONS = ("PendingPods", "ScaleUpLimit", "ScaleDownLimit", "TooManyReplicas", "TooFewReplicas")

REASON_TEXT = {
    "ScaleUp": "load above target",
    "ScaleDown": "load below target",
    "NoChange": "the ratio gives the current size",
    "WithinTolerance": "load within tolerance of target",
    "DirectionFlip": "filling in missing/pending pods reverses the direction; holding",
    "NoMetrics": "no ready pod reported a fresh sample; holding",
    "ScaleUpStabilized": "up only as far as the lowest recommendation within the scale-up window",
    "ScaleDownStabilized": "down only as far as the highest recommendation within the scale-down window",
    "ScaleUpLimit": "the scale-up rate policies allow no more now",
    "ScaleDownLimit": "the scale-down rate policies allow no fewer now",
    "TooManyReplicas": "clamped to maxReplicas",
    "TooFewReplicas": "clamped to minReplicas",
    "PendingPods": "pods are still Pending; no more are added until they run",
    "MetricsDegraded": "too many pods have no fresh sample; no scale-down",
    "ScalingDisabled": "replicas is 0: autoscaling is paused until the fleet is scaled up",
}


def decide(pods: list[PodSample] | tuple[PodSample, ...], current_replicas: int, spec: AutoscalingSpec,
           history: History, now: datetime) -> Decision:
    """One autoscaling decision for one fleet: call once per scrape interval with fresh samples.

    The operator writes desired_replicas to the scale subresource, decision.to_status() to
    status.lastDecision, history_to_status(decision.history) to status.autoscalerHistory, the
    conditions, and an Event when is_rescale or the reason changed. The history assumes
    desired_replicas is applied.
    """
    current = current_replicas
    verdicts = tuple(classify_pod(p, now, spec.scrape_interval_s) for p in pods)
    raw = raw_replicas(verdicts, current, spec.target_load_per_replica, spec.tolerance)
    degraded, degraded_text = metrics_degraded(raw.verdicts, spec.max_missing_fraction)
    pending = [v.name for v in verdicts if v.status == "pending"]
    recs = history.recommendations
    bound = _bound(current, spec)
    if bound is not None:
        stages, reason = (bound[0],) * 5, bound[1]
    elif raw.reason == "NoMetrics":
        stages, reason = (current,) * 5, "NoMetrics"
    else:
        stabilized, stabilize_reason = stabilize(raw.replicas, current, recs, spec, now)
        rate_limited, clamped, limit_reason = limit(stabilized, current, spec, history, now)
        desired, guard_reason = guard(clamped, current, degraded, pending)
        stages = (raw.replicas, stabilized, rate_limited, clamped, desired)
        reason = guard_reason or limit_reason or stabilize_reason or raw.reason
        recs = record_recommendation(recs, raw.replicas, spec, now)
    desired = stages[4]
    ups, downs = record_scale_events(history, current, desired, spec, now)
    total = sum((v.load for v in verdicts if v.status == "sample"), 0.0)
    return Decision(
        time=now, current_replicas=current, desired_replicas=desired,
        raw=stages[0], stabilized=stages[1], rate_limited=stages[2], clamped=stages[3],
        reason=reason, message=_message(reason, current, stages, raw, total, spec),
        pods=raw.verdicts, ratio=raw.ratio, corrected_ratio=raw.corrected_ratio,
        total_load=total, target_load_per_replica=spec.target_load_per_replica, degraded=degraded,
        conditions=_conditions(reason, raw, degraded, degraded_text, pending),
        history=History(recs, ups, downs),
    )


def _message(reason: str, current: int, stages: tuple[int, ...], raw: RawResult, total: float,
             spec: AutoscalingSpec) -> str:
    head = f"{current} -> {stages[4]}: {REASON_TEXT.get(reason, reason)}"
    if raw.ratio is None:
        return head
    counted = sum(1 for v in raw.verdicts if v.status == "sample")
    ratio = f"ratio {raw.ratio:.3f}"
    if raw.corrected_ratio != raw.ratio:
        ratio += f" (corrected {raw.corrected_ratio:.3f})"
    return (f"{head} (load {total:g} on {counted} pods, target {spec.target_load_per_replica:g}/pod, "
            f"{ratio}; raw {stages[0]}, stabilized {stages[1]}, rate-limited {stages[2]}, "
            f"clamped {stages[3]})")


def _conditions(reason: str, raw: RawResult, degraded: bool, degraded_text: str,
                pending: list[str]) -> tuple[Condition, ...]:
    counted = sum(1 for v in raw.verdicts if v.status == "sample")
    if raw.ratio is None:
        available = Condition("MetricsAvailable", "False", "NoMetrics", REASON_TEXT["NoMetrics"])
    else:
        available = Condition("MetricsAvailable", "True", "SamplesReceived",
                              f"{counted} of {len(raw.verdicts)} pods reported load")
    degraded_cond = Condition("MetricsDegraded", "True" if degraded else "False",
                              "MissingSamples" if degraded else "SamplesFresh", degraded_text)
    if reason in LIMITED_REASONS:
        text = REASON_TEXT[reason] + (f": {', '.join(pending)}" if reason == "PendingPods" else "")
        limited = Condition("ScalingLimited", "True", reason, text)
    else:
        limited = Condition("ScalingLimited", "False", "DesiredWithinRange",
                            "the desired count is within the acceptable range")
    return available, degraded_cond, limited
