"""HPA behavior: stabilization windows and rate policies, each a pure function of history and now.

Follows horizontal.go (stabilizeRecommendationWithBehaviors, convertDesiredReplicasWithBehaviorRate)
and the min/max clamp after it. Each stage returns replicas and the reason it cut, if it did; the
record_* helpers give the history the next decision needs. Pure: no I/O, no clock.
"""
from __future__ import annotations

import math
from datetime import datetime, timedelta

from fleet_operator.autoscaling.history import History, Recommendation, ScaleEvent
from fleet_operator.spec.autoscaling import AutoscalingSpec, ScalingRules

# ---- stabilization windows (horizontal.go's stabilizeRecommendationWithBehaviors) ----

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


def record_recommendation(recs: tuple[Recommendation, ...], raw: int, spec: AutoscalingSpec, now: datetime):
    """Keep the recommendations either window can still see, plus this one."""
    longest = max(spec.scale_up.stabilization_window_s, spec.scale_down.stabilization_window_s)
    cutoff = now - timedelta(seconds=longest)
    return tuple(r for r in recs if r.at > cutoff) + (Recommendation(now, raw),)


# ---- rate policies and clamp (horizontal.go's convertDesiredReplicasWithBehaviorRate) ----

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


def record_scale_events(history: History, current: int, desired: int, spec: AutoscalingSpec,
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
