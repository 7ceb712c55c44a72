"""decide(): one native autoscaling decision, and the words that explain it. Pure: no I/O, no clock.

Pods' samples + current size + spec + history + now -> Decision, in HPA v2's order: the replica
calculator (replicas.py), then stabilization, rate limits and the min/max clamp (behavior.py). Two
guards of our own run last: no scale-down while too many samples are missing (MetricsDegraded), no
scale-up while pods are Pending (ScalingLimited). With the gateway, a fleet allowed to reach 0 is
woken from it and guarded on the way down by the requests waiting there (zero.py). Each stage's
value and reason land in the Decision, its message and its conditions. Scraping and applying are tick.py's.
"""
from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from fleet_operator.autoscaling.behavior import (
    limit,
    record_recommendation,
    record_scale_events,
    stabilize,
)
from fleet_operator.autoscaling.history import History
from fleet_operator.autoscaling.replicas import classify_pod, raw_replicas
from fleet_operator.autoscaling.values import (
    Condition,
    Decision,
    GatewayDemand,
    PodSample,
    PodVerdict,
    RawResult,
)
from fleet_operator.autoscaling.zero import at_zero, guard_zero
from fleet_operator.spec.autoscaling import AutoscalingSpec

# ---- our guards, conditions, and the whole decision ----

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


LIMITED_REASONS = ("PendingPods", "ScaleUpLimit", "ScaleDownLimit", "TooManyReplicas", "TooFewReplicas",
                   "GatewayUnknown", "GatewayWaiting")

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
    "ScaleFromZero": "requests are waiting at the gateway: woken at once (no window, no rate limit)",
    "NoDemand": "no request is waiting at the gateway: the fleet stays at 0",
    "GatewayUnknown": "the gateway's waiting requests are unknown: never to 0 on that",
    "ZeroGatewayUnknown": "the gateway's waiting requests are unknown: the fleet stays at 0 until they are known",
    "GatewayWaiting": "requests are waiting at the gateway: not to 0",
}


class Stages(NamedTuple):
    """Each stage's replicas in HPA's order; `desired` (after our guards) is what gets written."""

    raw: int
    stabilized: int
    rate_limited: int
    clamped: int
    desired: int

    @classmethod
    def held(cls, replicas: int) -> Stages:
        """Every stage at one size: a decision taken before any metric is read, or without one."""
        return cls(raw=replicas, stabilized=replicas, rate_limited=replicas, clamped=replicas,
                   desired=replicas)


def decide(pods: list[PodSample] | tuple[PodSample, ...], current_replicas: int, spec: AutoscalingSpec,
           history: History, now: datetime, gateway: GatewayDemand | None = None) -> Decision:
    """One autoscaling decision for one fleet: call once per scrape interval with fresh samples.

    The operator writes desired_replicas to the scale subresource, decision.to_status() to
    status.lastDecision, history_to_status(decision.history) to status.autoscalerHistory, the
    conditions, and an Event when is_rescale or the reason changed. The history assumes
    desired_replicas is applied. gateway: the requests waiting at the fleet's gateway, or None
    when not read (no gateway, or minReplicas >= 1: the tick scrapes it only for a fleet that may
    go to 0); it decides only for a fleet whose minReplicas is 0, where None counts as unknown.
    """
    current = current_replicas
    verdicts = tuple(classify_pod(p, now, spec.scrape_interval_s) for p in pods)
    raw = raw_replicas(verdicts, current, spec.target_load_per_replica, spec.tolerance)
    degraded, degraded_text = metrics_degraded(raw.verdicts, spec.max_missing_fraction)
    pending = [v.name for v in verdicts if v.status == "pending"]
    stages, reason, recommendation = _stages(raw, current, spec, history, now, gateway, degraded, pending)
    recs = history.recommendations if recommendation is None \
        else record_recommendation(history.recommendations, recommendation, spec, now)
    ups, downs = record_scale_events(history, current, stages.desired, spec, now)
    total = sum((v.load for v in verdicts if v.status == "sample"), 0.0)
    return Decision(
        time=now, current_replicas=current, desired_replicas=stages.desired,
        raw=stages.raw, stabilized=stages.stabilized, rate_limited=stages.rate_limited,
        clamped=stages.clamped,
        reason=reason, message=_message(reason, current, stages, raw, total, spec, gateway),
        pods=raw.verdicts, ratio=raw.ratio, corrected_ratio=raw.corrected_ratio,
        total_load=total, target_load_per_replica=spec.target_load_per_replica, degraded=degraded,
        conditions=_conditions(reason, raw, degraded, degraded_text, pending),
        history=History(recs, ups, downs), gateway=gateway,
    )


def _stages(raw: RawResult, current: int, spec: AutoscalingSpec, history: History, now: datetime,
            gateway: GatewayDemand | None, degraded: bool,
            pending: list[str]) -> tuple[Stages, str, int | None]:
    """(each stage's replicas, the reason, the recommendation the windows remember or None).

    Every branch says what it records. As HPA: a decision from the metrics records its raw
    recommendation; one taken before them (ScalingDisabled, the [min, max] bounds) or without
    them (NoMetrics) records none. Ours: a fleet at 0 records its size, so the scale-down window
    remembers a wake-up.
    """
    zero = at_zero(current, spec, gateway)
    if zero is not None:
        replicas, reason = zero
        return Stages.held(replicas), reason, replicas
    bound = _bound(current, spec)
    if bound is not None:
        replicas, reason = bound
        return Stages.held(replicas), reason, None
    if raw.reason == "NoMetrics":
        return Stages.held(current), "NoMetrics", None
    stabilized, stabilize_reason = stabilize(raw.replicas, current, history.recommendations, spec, now)
    rate_limited, clamped, limit_reason = limit(stabilized, current, spec, history, now)
    desired, guard_reason = guard(clamped, current, degraded, pending)
    desired, zero_reason = guard_zero(desired, current, spec, gateway)
    reason = zero_reason or guard_reason or limit_reason or stabilize_reason or raw.reason
    return Stages(raw.replicas, stabilized, rate_limited, clamped, desired), reason, raw.replicas


def _message(reason: str, current: int, stages: Stages, raw: RawResult, total: float,
             spec: AutoscalingSpec, gateway: GatewayDemand | None) -> str:
    head = f"{current} -> {stages.desired}: {REASON_TEXT.get(reason, reason)}"
    if gateway is not None:
        head += (f" (gateway: {gateway.waiting:g} waiting)" if gateway.waiting is not None
                 else f" (gateway: waiting unknown, {gateway.error})")
    if raw.ratio is None:
        return head
    counted = sum(1 for v in raw.verdicts if v.status == "sample")
    ratio = f"ratio {raw.ratio:.3f}"
    if raw.corrected_ratio != raw.ratio:
        ratio += f" (corrected {raw.corrected_ratio:.3f})"
    return (f"{head} (load {total:g} on {counted} pods, target {spec.target_load_per_replica:g}/pod, "
            f"{ratio}; raw {stages.raw}, stabilized {stages.stabilized}, "
            f"rate-limited {stages.rate_limited}, clamped {stages.clamped})")


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
