"""The native autoscaling decision: pods' samples + spec + history + now -> Decision. Pure: no I/O, no clock.

Follows Kubernetes HPA v2: replica_calculator.go (group pods, ratio, tolerance, missing and unready
pods filled conservatively, direction-flip hold) and horizontal.go (stabilization windows, rate
policies, min/max clamp). Two guards of our own run last: no scale-down while too many samples are
missing (MetricsDegraded), no scale-up while pods are Pending (ScalingLimited). Scraping is
scraper.py's job; writing the scale subresource, status and Events is the operator's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Literal, Mapping

from fleet_operator.autoscaling_spec import AutoscalingSpec, ScalingRules

# Float noise guard: 64 load / 32 target must give 2 pods, not ceil(2.0000000001) = 3.
EPSILON = 1e-9
# A sample older than this many scrape intervals is stale, i.e. missing.
STALE_AFTER_INTERVALS = 2

PodStatus = Literal["sample", "missing", "pending", "unready", "ignored"]


# ---- history: what the windows and rate policies remember, persisted in status.autoscalerHistory ----

def format_time(at: datetime) -> str:
    """RFC3339 in UTC ("2026-11-29T18:42:05Z"; fractional seconds kept when present)."""
    return at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(timezone.utc)


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


# ---- inputs and outputs ----

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

    @property
    def is_rescale(self) -> bool:
        return self.desired_replicas != self.current_replicas

    def is_news(self, last_decision: Mapping | None) -> bool:
        """Worth an Event: a rescale, or a reason or degraded state other than status.lastDecision's."""
        last = last_decision or {}
        return (self.is_rescale or last.get("reason") != self.reason
                or last.get("metricsDegraded") != self.degraded)

    def condition(self, type_: str) -> Condition:
        return next(c for c in self.conditions if c.type == type_)

    def to_status(self) -> dict:
        """status.lastDecision: inputs and each step of the maths, JSON-ready."""
        return {
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
        }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


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


# ---- 3. stabilization windows (horizontal.go's stabilizeRecommendationWithBehaviors) ----

def stabilize(raw: int, current: int, recs: tuple[Recommendation, ...], spec: AutoscalingSpec,
              now: datetime) -> tuple[int, str]:
    """Scale up only to the lowest, down only to the highest recommendation within each window."""
    up_cutoff = now - timedelta(seconds=spec.scale_up.stabilization_window_s)
    down_cutoff = now - timedelta(seconds=spec.scale_down.stabilization_window_s)
    up = min([raw] + [r.replicas for r in recs if r.at > up_cutoff])
    down = max([raw] + [r.replicas for r in recs if r.at > down_cutoff])
    stabilized = min(max(current, up), down)
    if stabilized == raw:
        return stabilized, ""
    return stabilized, "ScaleUpStabilized" if raw >= current else "ScaleDownStabilized"


def _record(recs: tuple[Recommendation, ...], raw: int, spec: AutoscalingSpec, now: datetime):
    """Keep the recommendations either window can still see, plus this one."""
    longest = max(spec.scale_up.stabilization_window_s, spec.scale_down.stabilization_window_s)
    cutoff = now - timedelta(seconds=longest)
    return tuple(r for r in recs if r.at > cutoff) + (Recommendation(now, raw),)


# ---- 4. rate policies and clamp (horizontal.go's convertDesiredReplicasWithBehaviorRate) ----

def _changed_within(events: tuple[ScaleEvent, ...], period_s: int, now: datetime) -> int:
    cutoff = now - timedelta(seconds=period_s)
    return sum(e.change for e in events if e.at > cutoff)


def _period_start(current: int, history: History, period_s: int, now: datetime) -> int:
    """Replicas at the start of the policy's period, undoing the scale events inside it."""
    added = _changed_within(history.scale_up_events, period_s, now)
    deleted = _changed_within(history.scale_down_events, period_s, now)
    return current - added + deleted


def scale_up_limit(current: int, history: History, rules: ScalingRules, now: datetime) -> int:
    """The most replicas the scale-up policies allow now (calculateScaleUpLimitWithScalingRules)."""
    if rules.select_policy == "Disabled" or not rules.policies:
        return current
    proposals = []
    for policy in rules.policies:
        start = _period_start(current, history, policy.period_s, now)
        if policy.type == "Pods":
            proposals.append(start + policy.value)
        else:  # rounded up, or a small percentage of few pods would never add one
            proposals.append(math.ceil(start * (1 + policy.value / 100)))
    return min(proposals) if rules.select_policy == "Min" else max(proposals)


def scale_down_limit(current: int, history: History, rules: ScalingRules, now: datetime) -> int:
    """The fewest replicas the scale-down policies allow now (calculateScaleDownLimitWithBehaviors)."""
    if rules.select_policy == "Disabled" or not rules.policies:
        return current
    proposals = []
    for policy in rules.policies:
        start = _period_start(current, history, policy.period_s, now)
        if policy.type == "Pods":
            proposals.append(start - policy.value)
        else:  # truncated, as Go's int32() does
            proposals.append(int(start * (1 - policy.value / 100)))
    # "Min" selects the smallest change, which for a scale-down is the largest count
    return max(proposals) if rules.select_policy == "Min" else min(proposals)


def limit(desired: int, current: int, spec: AutoscalingSpec, history: History,
          now: datetime) -> tuple[int, int, str]:
    """(rate_limited, clamped, limiting reason or ""), with HPA's choice of reason."""
    if desired > current:
        up_limit = max(scale_up_limit(current, history, spec.scale_up, now), current)
        rate_limited = min(desired, up_limit)
        clamped = min(rate_limited, spec.max_replicas)
        cut = "ScaleUpLimit" if up_limit < spec.max_replicas else "TooManyReplicas"
        return rate_limited, clamped, cut if clamped != desired else ""
    if desired < current:
        down_limit = min(scale_down_limit(current, history, spec.scale_down, now), current)
        rate_limited = max(desired, down_limit)
        clamped = max(rate_limited, spec.min_replicas)
        cut = "ScaleDownLimit" if down_limit > spec.min_replicas else "TooFewReplicas"
        return rate_limited, clamped, cut if clamped != desired else ""
    return desired, desired, ""


def _record_event(history: History, current: int, desired: int, spec: AutoscalingSpec,
                  now: datetime) -> tuple[tuple[ScaleEvent, ...], tuple[ScaleEvent, ...]]:
    """Scale events the rate policies can still see, plus this change if any."""
    def keep(events, rules: ScalingRules):
        longest = max((p.period_s for p in rules.policies), default=0)
        return tuple(e for e in events if e.at > now - timedelta(seconds=longest))

    ups, downs = keep(history.scale_up_events, spec.scale_up), keep(history.scale_down_events, spec.scale_down)
    if desired > current:
        ups += (ScaleEvent(now, desired - current),)
    elif desired < current:
        downs += (ScaleEvent(now, current - desired),)
    return ups, downs

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
    "TooManyReplicas": "capped at maxReplicas",
    "TooFewReplicas": "raised to minReplicas",
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
        recs = _record(recs, raw.replicas, spec, now)
    desired = stages[4]
    ups, downs = _record_event(history, current, desired, spec, now)
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
