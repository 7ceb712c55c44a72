"""Table tests of decide(): one case per HPA rule and per guard of ours.

Like replica_calculator_test.go: a case names the pods (load, or why there is none), the current
size and the expected size and reason; the comment gives the counterfactual (what a naive rule
would have done). Target is 32 sequences per pod unless a case says otherwise.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

import pytest

from fleet_operator.autoscaling.decide import decide
from fleet_operator.autoscaling.history import (
    History,
    Recommendation,
    ScaleEvent,
    history_from_status,
    history_to_status,
)
from fleet_operator.autoscaling.values import GatewayDemand, PodSample
from fleet_operator.spec.autoscaling import AutoscalingSpec, ScalingPolicy, ScalingRules

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)
SPEC = AutoscalingSpec(enabled=True, min_replicas=1, max_replicas=20, target_load_per_replica=32.0)
LENIENT = replace(SPEC, max_missing_fraction=0.5)  # missing pods allowed: the HPA rule itself shows


def ready(load: float, age_s: float = 0.0) -> dict:
    return {"phase": "Running", "ready": True, "load": load, "scraped_at": NOW - timedelta(seconds=age_s)}


def missing(why: str = "timeout after 1s") -> dict:
    return {"phase": "Running", "ready": True, "load": None, "error": why}


def pending() -> dict:
    return {"phase": "Pending", "ready": False}


def unready(load: float) -> dict:
    return {"phase": "Running", "ready": False, "load": load, "scraped_at": NOW}


def deleting(load: float) -> dict:
    return {**ready(load), "deleting": True}


def failed() -> dict:
    return {"phase": "Failed", "ready": False}


def fleet(*pods: dict) -> tuple[PodSample, ...]:
    return tuple(PodSample(name=f"p{i}", **pod) for i, pod in enumerate(pods))


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def up_rules(*policies: ScalingPolicy, select: str = "Max", window_s: int = 0) -> ScalingRules:
    return ScalingRules(stabilization_window_s=window_s, policies=policies, select_policy=select)


def down_rules(*policies: ScalingPolicy, select: str = "Max", window_s: int = 300) -> ScalingRules:
    return ScalingRules(stabilization_window_s=window_s, policies=policies, select_policy=select)


@dataclass(frozen=True)
class Case:
    id: str
    pods: tuple[PodSample, ...]
    current: int
    desired: int
    reason: str
    raw: int | None = None  # the ratio's answer, when it differs from desired
    spec: AutoscalingSpec = SPEC
    history: History = field(default_factory=History)
    gateway: GatewayDemand | None = None


# Scale to and from zero: minReplicas 0 (allowed with the gateway), its waiting gauge as demand.
ZERO = replace(SPEC, min_replicas=0)
UNKNOWN = GatewayDemand(None, "connection error: refused")


def waiting(n: float) -> GatewayDemand:
    return GatewayDemand(n)


CASES = [
    # -- ratio and tolerance --
    Case("scale-up", fleet(ready(64), ready(64)), 2, 4, "ScaleUp"),
    Case("scale-down", fleet(ready(8), ready(8), ready(8), ready(8)), 4, 1, "ScaleDown"),
    # 4 without tolerance (ceil(3 * 1.0625))
    Case("tolerance-up-side", fleet(ready(34), ready(34), ready(34)), 3, 3, "WithinTolerance"),
    # 19 without tolerance (ceil(20 * 0.906))
    Case("tolerance-down-side", fleet(*[ready(29)] * 20), 20, 20, "WithinTolerance"),
    # 4 with the default 0.1 (ratio 1.25)
    Case("tolerance-from-spec", fleet(ready(40), ready(40), ready(40)), 3, 3, "WithinTolerance",
         spec=replace(SPEC, tolerance=0.3)),
    Case("ratio-gives-current", fleet(ready(20), ready(20)), 2, 2, "NoChange"),
    # -- missing samples (HPA's rules, with our MetricsDegraded guard relaxed) --
    # 7 if the missing pod were read at target
    Case("missing-on-scale-up-assumed-idle", fleet(ready(96), ready(96), missing()), 3, 6, "ScaleUp"),
    # 1 if the missing pod were read as idle (KEDA #3065: scaled to min at peak)
    Case("missing-on-scale-down-assumed-at-target",
         fleet(ready(4), ready(4), ready(4), missing()), 4, 2, "ScaleDown", spec=LENIENT),
    # 4 if the missing pod were dropped (ratio 1.25); filled as idle the ratio becomes 0.83
    Case("direction-flip-held", fleet(ready(40), ready(40), missing()), 3, 3, "DirectionFlip"),
    # 2 if the missing pod were read as idle at a ratio of exactly 1.0 (HPA's Pods-metric path)
    Case("missing-at-exact-target-holds", fleet(ready(32), ready(32), missing()), 3, 3, "WithinTolerance",
         spec=LENIENT),
    Case("nan-sample-is-missing", fleet(ready(96), ready(96), ready(math.nan)), 3, 6, "ScaleUp"),
    Case("negative-sample-is-missing", fleet(ready(4), ready(4), ready(4), ready(-3)), 4, 2, "ScaleDown",
         spec=LENIENT),
    # 1 if the 11 s old sample (scrape interval 5 s) were used
    Case("stale-sample-is-missing", fleet(ready(4), ready(4), ready(4), ready(4, age_s=11)), 4, 2,
         "ScaleDown", spec=LENIENT),
    Case("sample-within-two-intervals-is-fresh", fleet(ready(4), ready(4), ready(4), ready(4, age_s=9)),
         4, 1, "ScaleDown"),
    Case("no-metrics-holds", fleet(missing(), missing("connection refused")), 2, 2, "NoMetrics"),
    # -- MetricsDegraded: no data is never read as no load --
    # 2 if missing pods were allowed (see missing-on-scale-down), 1 if read as 0
    Case("degraded-blocks-scale-down", fleet(ready(4), ready(4), ready(4), missing()), 4, 4,
         "MetricsDegraded", raw=2),
    Case("degraded-does-not-block-scale-up", fleet(ready(96), ready(96), missing()), 3, 6, "ScaleUp"),
    # 1 if the NaN were read as 0
    Case("degraded-blocks-nan-scale-down", fleet(ready(4), ready(4), ready(math.nan)), 3, 3, "MetricsDegraded",
         raw=2),
    # -- pending and unready pods (HPA: set aside, idle on scale-up) --
    # 8 if the unready pod's sample (50) were counted
    Case("unready-on-scale-up-assumed-idle", fleet(ready(96), ready(96), unready(50)), 3, 6, "ScaleUp"),
    # 2 if the pending pods were counted at target
    Case("pending-on-scale-down-ignored", fleet(ready(8), ready(8), pending(), pending()), 4, 1, "ScaleDown"),
    # 6 without the guard (AIBrix #2670: 2 -> 4 -> 8 -> 16 while pods were Pending)
    Case("pending-guard-no-more-pods", fleet(ready(96), ready(96), pending()), 3, 3, "PendingPods", raw=6),
    # 2 by the ratio alone: with the new pod idle the ratio is 1.0
    Case("pending-on-scale-up-within-tolerance", fleet(ready(48), ready(48), pending()), 3, 3,
         "WithinTolerance"),
    # -- ignored pods --
    # 20 if the deleting pod's 600 were counted
    Case("deleting-and-failed-ignored", fleet(ready(64), ready(64), deleting(600), failed()), 2, 4, "ScaleUp"),
    # -- stabilization windows --
    # 1 without the recommendation of 4 made 100 s ago (down window 300 s)
    Case("down-window-holds-highest", fleet(*[ready(8)] * 4), 4, 4, "ScaleDownStabilized", raw=1,
         history=History(recommendations=(Recommendation(ago(100), 4),))),
    Case("down-window-expired", fleet(*[ready(8)] * 4), 4, 1, "ScaleDown",
         history=History(recommendations=(Recommendation(ago(301), 4),))),
    # 1 without the window; the window's highest (3) wins, not the current size (4)
    Case("down-window-takes-highest-not-current", fleet(*[ready(8)] * 4), 4, 3, "ScaleDownStabilized",
         raw=1, history=History(recommendations=(Recommendation(ago(50), 3), Recommendation(ago(20), 2)))),
    # 4 without the recommendation of 3 made 30 s ago (up window 60 s)
    Case("up-window-holds-lowest", fleet(ready(64), ready(64)), 2, 3, "ScaleUpStabilized", raw=4,
         spec=replace(SPEC, scale_up=replace(SPEC.scale_up, stabilization_window_s=60)),
         history=History(recommendations=(Recommendation(ago(30), 3),))),
    # -- rate policies (defaults: up max(+4 pods, +100%) per 15 s, down -100% per 15 s) --
    # 12 unlimited; +4 pods beats +100% of 2
    Case("rate-default-max-of-pods-and-percent", fleet(ready(192), ready(192)), 2, 6, "ScaleUpLimit", raw=12),
    # 6 by +4 pods under Max
    Case("rate-select-min", fleet(ready(192), ready(192)), 2, 4, "ScaleUpLimit", raw=12,
         spec=replace(SPEC, scale_up=up_rules(*SPEC.scale_up.policies, select="Min"))),
    Case("rate-pods-policy", fleet(ready(128), ready(128)), 2, 3, "ScaleUpLimit", raw=8,
         spec=replace(SPEC, scale_up=up_rules(ScalingPolicy("Pods", 1, 60)))),
    # ceil(4 * 1.5) = 6
    Case("rate-percent-policy", fleet(*[ready(96)] * 4), 4, 6, "ScaleUpLimit", raw=12,
         spec=replace(SPEC, scale_up=up_rules(ScalingPolicy("Percent", 50, 60)))),
    # 4 under the rules of rate-pods-policy otherwise
    Case("rate-disabled-up", fleet(ready(64), ready(64)), 2, 2, "ScaleUpLimit", raw=4,
         spec=replace(SPEC, scale_up=up_rules(ScalingPolicy("Pods", 4, 15), select="Disabled"))),
    # 12 by the ratio; the period started at 2 (4 added 10 s ago), so max(2 + 4, 2 * 2) = 6 already
    Case("rate-counts-recent-scale-ups", fleet(*[ready(64)] * 6), 6, 6, "ScaleUpLimit", raw=12,
         history=History(scale_up_events=(ScaleEvent(ago(10), 4),))),
    Case("rate-scale-ups-outside-period-forgotten", fleet(*[ready(64)] * 6), 6, 12, "ScaleUp",
         history=History(scale_up_events=(ScaleEvent(ago(16), 4),))),
    Case("rate-down-pods-policy", fleet(*[ready(4)] * 4), 4, 3, "ScaleDownLimit", raw=1,
         spec=replace(SPEC, scale_down=down_rules(ScalingPolicy("Pods", 1, 60)))),
    # int(4 * 0.5) = 2
    Case("rate-down-percent-policy", fleet(*[ready(4)] * 4), 4, 2, "ScaleDownLimit", raw=1,
         spec=replace(SPEC, scale_down=down_rules(ScalingPolicy("Percent", 50, 60)))),
    # 1 by the ratio; the period started at 4 (2 removed 5 s ago) and allows 50%: no fewer than 2
    Case("rate-counts-recent-scale-downs", fleet(ready(4), ready(4)), 2, 2, "ScaleDownLimit", raw=1,
         spec=replace(SPEC, scale_down=down_rules(ScalingPolicy("Percent", 50, 60))),
         history=History(scale_down_events=(ScaleEvent(ago(5), 2),))),
    # Min selects the smaller change: -1 pod rather than -50%
    Case("rate-down-select-min", fleet(*[ready(4)] * 4), 4, 3, "ScaleDownLimit", raw=1,
         spec=replace(SPEC, scale_down=down_rules(ScalingPolicy("Pods", 1, 60), ScalingPolicy("Percent", 50, 60),
                                                  select="Min"))),
    Case("rate-disabled-down", fleet(*[ready(4)] * 4), 4, 4, "ScaleDownLimit", raw=1,
         spec=replace(SPEC, scale_down=down_rules(ScalingPolicy("Percent", 100, 15), select="Disabled"))),
    # -- clamp --
    Case("clamp-max", fleet(ready(192), ready(192)), 2, 5, "TooManyReplicas", raw=12,
         spec=replace(SPEC, max_replicas=5)),
    Case("clamp-min", fleet(*[ready(4)] * 4), 4, 3, "TooFewReplicas", raw=1, spec=replace(SPEC, min_replicas=3)),
    Case("zero-load-goes-to-min", fleet(ready(0), ready(0), ready(0)), 3, 1, "TooFewReplicas", raw=0),
    Case("current-above-max", fleet(*[ready(32)] * 10), 10, 8, "TooManyReplicas", spec=replace(SPEC, max_replicas=8)),
    Case("current-below-min", fleet(ready(0)), 1, 2, "TooFewReplicas", spec=replace(SPEC, min_replicas=2)),
    Case("zero-replicas-pauses", fleet(), 0, 0, "ScalingDisabled"),
    # -- scale to and from zero (gateway) --
    # 0 under HPA's rule (replicas 0 pauses autoscaling)
    Case("from-zero-when-requests-wait", fleet(), 0, 1, "ScaleFromZero", spec=ZERO, gateway=waiting(3)),
    # 0 if the up window's recommendation of 0 (50 s ago) or the disabled rate policy applied
    Case("from-zero-ignores-up-window-and-rate", fleet(), 0, 1, "ScaleFromZero", gateway=waiting(1),
         spec=replace(ZERO, scale_up=up_rules(ScalingPolicy("Pods", 1, 60), select="Disabled",
                                               window_s=120)),
         history=History(recommendations=(Recommendation(ago(50), 0),))),
    # 1 per waiting request would be 5: the first pod's load sizes the rest once it serves
    Case("from-zero-one-pod-first", fleet(), 0, 1, "ScaleFromZero", spec=ZERO, gateway=waiting(500)),
    Case("at-zero-nothing-waiting", fleet(), 0, 0, "NoDemand", spec=ZERO, gateway=waiting(0)),
    # a terminating pod left over from the scale-down does not wake the fleet
    Case("at-zero-deleting-pod-ignored", fleet(deleting(40)), 0, 0, "NoDemand", spec=ZERO,
         gateway=waiting(0)),
    Case("at-zero-gateway-unknown-holds", fleet(), 0, 0, "ZeroGatewayUnknown", spec=ZERO, gateway=UNKNOWN),
    # the gateway wakes only a fleet whose minReplicas is 0; this one was paused by hand
    Case("at-zero-min-one-stays-paused", fleet(), 0, 0, "ScalingDisabled", gateway=waiting(4)),
    Case("to-zero-after-the-down-window", fleet(ready(0)), 1, 0, "ScaleDown", spec=ZERO,
         gateway=waiting(0), history=History(recommendations=(Recommendation(ago(301), 1),))),
    # 0 without the scale-down window (the recommendation of 1 made 100 s ago)
    Case("to-zero-held-by-the-down-window", fleet(ready(0)), 1, 1, "ScaleDownStabilized", raw=0,
         spec=ZERO, gateway=waiting(0), history=History(recommendations=(Recommendation(ago(100), 1),))),
    # 0 if a failed scrape of the gateway were read as nothing waiting
    Case("to-zero-gateway-unknown-keeps-one", fleet(ready(0), ready(0)), 2, 1, "GatewayUnknown", raw=0,
         spec=ZERO, gateway=UNKNOWN),
    Case("to-zero-no-gateway-known-keeps-one", fleet(ready(0)), 1, 1, "GatewayUnknown", raw=0, spec=ZERO),
    # 0 by the pods' load alone: a request waits at the gateway (its pod not yet in rotation)
    Case("to-zero-requests-waiting-keeps-one", fleet(ready(0)), 1, 1, "GatewayWaiting", raw=0,
         spec=ZERO, gateway=waiting(2)),
    # with minReplicas 1 the gateway's state changes nothing
    Case("min-one-gateway-unknown-no-effect", fleet(ready(0), ready(0), ready(0)), 3, 1, "TooFewReplicas",
         raw=0, gateway=UNKNOWN),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_decide(case: Case):
    decision = decide(case.pods, case.current, case.spec, case.history, NOW, case.gateway)
    assert (decision.desired_replicas, decision.reason) == (case.desired, case.reason), decision.message
    assert decision.raw == (case.raw if case.raw is not None else case.desired)


def test_a_wake_up_is_remembered_by_the_scale_down_window():
    woken = decide(fleet(), 0, ZERO, History(), NOW, waiting(1))
    # the new pod, idle once it has answered the request, is not sent back to 0 at once
    later = decide(fleet(ready(0)), 1, ZERO, woken.history, NOW + timedelta(seconds=10), waiting(0))
    assert (later.desired_replicas, later.reason, later.raw) == (1, "ScaleDownStabilized", 0)


def test_last_decision_reports_the_gateway():
    woken = decide(fleet(), 0, ZERO, History(), NOW, waiting(2))
    assert woken.to_status()["gateway"] == {"waiting": 2}
    assert "0 -> 1" in woken.message and "gateway: 2 waiting" in woken.message
    held = decide(fleet(ready(0)), 1, ZERO, History(), NOW, UNKNOWN)
    assert held.to_status()["gateway"] == {"waiting": "unknown", "why": UNKNOWN.error}
    assert held.condition("ScalingLimited").reason == "GatewayUnknown"
    assert "gateway" not in decide(fleet(ready(0)), 1, SPEC, History(), NOW).to_status()


def test_at_zero_an_unknown_gateway_count_limits_nothing():
    # the guard's GatewayUnknown means "not to 0"; at 0 already nothing is cut
    held = decide(fleet(), 0, ZERO, History(), NOW, UNKNOWN)
    assert (held.desired_replicas, held.reason) == (0, "ZeroGatewayUnknown")
    assert held.condition("ScalingLimited").status == "False"
    assert held.message.startswith("0 -> 0: the gateway's waiting requests are unknown: the fleet stays at 0")


def test_missing_pod_explained_with_the_load_assumed_for_it():
    decision = decide(fleet(ready(4), ready(4), ready(4), missing("HTTP 500")), 4, LENIENT, History(), NOW)
    assert decision.to_status()["pods"][3] == {"name": "p3", "load": "missing", "why": "HTTP 500", "assumed": 32.0}
    assert decision.ratio == pytest.approx(0.125)
    assert decision.corrected_ratio == pytest.approx(44 / 4 / 32)


def test_degraded_condition_names_the_missing_pods():
    decision = decide(fleet(ready(4), ready(4), missing("timeout after 1s")), 3, SPEC, History(), NOW)
    condition = decision.condition("MetricsDegraded")
    assert (condition.status, condition.reason) == ("True", "MissingSamples")
    assert "p2 (timeout after 1s)" in condition.message
    assert decision.degraded


def test_degraded_within_allowed_fraction_lets_scale_down():
    decision = decide(fleet(ready(4), ready(4), ready(4), missing()), 4, LENIENT, History(), NOW)
    assert decision.condition("MetricsDegraded").status == "False"
    assert decision.desired_replicas == 2


def test_pending_guard_sets_scaling_limited_naming_the_pods():
    decision = decide(fleet(ready(96), ready(96), pending()), 3, SPEC, History(), NOW)
    condition = decision.condition("ScalingLimited")
    assert (condition.status, condition.reason) == ("True", "PendingPods")
    assert "p2" in condition.message


def test_no_metrics_sets_metrics_available_false():
    decision = decide(fleet(missing()), 1, SPEC, History(), NOW)
    assert decision.condition("MetricsAvailable").status == "False"
    assert decision.history == History()  # HPA records no recommendation without metrics


def test_to_status_is_json_with_every_stage():
    decision = decide(fleet(ready(192), ready(192)), 2, SPEC, History(), NOW)
    status = json.loads(json.dumps(decision.to_status()))
    assert {k: status[k] for k in ("raw", "stabilized", "rateLimited", "clamped", "desiredReplicas")} == {
        "raw": 12, "stabilized": 12, "rateLimited": 6, "clamped": 6, "desiredReplicas": 6}
    assert (status["time"], status["reason"], status["totalLoad"]) == ("2026-11-29T12:00:00Z", "ScaleUpLimit", 384.0)
    assert "2 -> 6" in status["message"]


def test_history_records_recommendation_and_scale_event():
    decision = decide(fleet(ready(64), ready(64)), 2, SPEC, History(), NOW)
    assert decision.history == History(
        recommendations=(Recommendation(NOW, 4),), scale_up_events=(ScaleEvent(NOW, 2),))


def test_history_forgets_what_no_window_can_see():
    old = History(recommendations=(Recommendation(ago(301), 9), Recommendation(ago(299), 2)),
                  scale_down_events=(ScaleEvent(ago(16), 1), ScaleEvent(ago(14), 1)))
    decision = decide(fleet(ready(32), ready(32)), 2, SPEC, old, NOW)
    assert decision.history.recommendations == (Recommendation(ago(299), 2), Recommendation(NOW, 2))
    assert decision.history.scale_down_events == (ScaleEvent(ago(14), 1),)


def test_history_round_trips_through_status_json():
    first = decide(fleet(*[ready(64)] * 2), 2, SPEC, History(), ago(30))
    second = decide(fleet(*[ready(4)] * 4), 4, SPEC, first.history, NOW)
    restored = history_from_status(json.loads(json.dumps(history_to_status(second.history))))
    assert restored == second.history
    # after a restart the down window still remembers the recommendation of 4 made 30 s ago
    third = decide(fleet(*[ready(4)] * 4), 4, SPEC, restored, NOW + timedelta(seconds=5))
    assert (third.desired_replicas, third.reason) == (4, "ScaleDownStabilized")


@pytest.mark.parametrize("status", [None, {}, {"recommendations": "junk"},
                                    {"recommendations": [{"time": "yesterday", "replicas": 3}, {"replicas": 2}]}],
                         ids=["none", "empty", "not-a-list", "bad-entries"])
def test_history_from_malformed_status_is_empty(status):
    assert history_from_status(status) == History()


@pytest.mark.parametrize("pods, current, last, news", [
    (fleet(ready(64), ready(64)), 2, {"reason": "ScaleUp", "metricsDegraded": False}, True),
    (fleet(ready(32), ready(32)), 2, {"reason": "WithinTolerance", "metricsDegraded": False}, False),
    # Both steady: an Event every interval at a boundary would be noise.
    (fleet(ready(32), ready(32)), 2, {"reason": "NoChange", "metricsDegraded": False}, False),
    (fleet(ready(32), ready(32)), 2, {"reason": "ScaleDownStabilized", "metricsDegraded": False}, True),
    (fleet(ready(32), missing()), 2, {"reason": "WithinTolerance", "metricsDegraded": False}, True),
    (fleet(ready(32), ready(32)), 2, None, True),
], ids=["rescale", "same-hold", "steady-reason-changed", "reason-changed", "degraded-changed",
        "first-decision"])
def test_is_news_for_an_event(pods, current, last, news):
    assert decide(pods, current, SPEC, History(), NOW).is_news(last) is news
