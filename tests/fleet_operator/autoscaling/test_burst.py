"""A burst in native mode: decide() every 15 s with the history it returned, as the tick runs it.

The fleet is at 1 pod when its load jumps; each decision adds pods, and the pods it added are not
serving yet when the next decision comes (a model load takes minutes on GPUs). The chart's recording
rules had the same question to answer for hpa and keda mode (docs/operator.md): a pod that never
answered holds no load, a pod that answered and stopped is unknown. Native mode follows the HPA: a
pod that is Running but not ready (loading: its readiness probe fails until the model is in) is
idle on a scale-up, and so is a ready pod whose scrape fails (missing); neither stalls the burst.
Only Pending pods (no node yet) hold it, on purpose (the PendingPods guard).
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest

from fleet_operator.autoscaling.decide import decide
from fleet_operator.autoscaling.history import History
from fleet_operator.autoscaling.values import PodSample
from fleet_operator.spec.autoscaling import AutoscalingSpec

START = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)
INTERVAL_S = 15  # the HPA's sync period, and the default rate policies' period
# Defaults but for maxReplicas: +4 pods or +100 % per 15 s, no scale-up window.
SPEC = AutoscalingSpec(enabled=True, min_replicas=1, max_replicas=32, target_load_per_replica=32.0)
LOAD = 640.0  # on the one serving pod: 20 pods' worth


def serving(name: str, now: datetime) -> PodSample:
    return PodSample(name, "Running", True, load=LOAD, scraped_at=now)


def loading(name: str, now: datetime) -> PodSample:
    """Running, readiness failing, nothing listening yet: the scrape is refused."""
    return PodSample(name, "Running", False, error="connection error: refused")


def stopped(name: str, now: datetime) -> PodSample:
    """Still ready (the probe has not failed yet) but its scrape times out: a missing sample."""
    return PodSample(name, "Running", True, error="timeout after 1s")


def pending(name: str, now: datetime) -> PodSample:
    return PodSample(name, "Pending", False)


def burst(new_pod: Callable[[str, datetime], PodSample], steps: int) -> list[tuple[int, str]]:
    """(desired, reason) of each decision: pod 0 serves LOAD, every pod added since is new_pod."""
    current, history, out = 1, History(), []
    for step in range(steps):
        now = START + timedelta(seconds=step * INTERVAL_S)
        pods = [serving("p0", now)] + [new_pod(f"p{i}", now) for i in range(1, current)]
        decision = decide(pods, current, SPEC, history, now)
        out.append((decision.desired_replicas, decision.reason))
        current, history = decision.desired_replicas, decision.history
    return out


# 1 -> 5 (+4), 5 -> 10 (+100 %), 10 -> 20: every step as large as the rate policies allow. Each new
# pod is read as idle, so the one serving pod's 640 sequences spread over all of them: at 20 pods
# the corrected ratio is 1.0 and the fleet holds. Were the silent pods unknown (the old recording
# rules' view of a loading pod), the fleet would stay at 5 until they serve.
FULL_SPEED = [(5, "ScaleUpLimit"), (10, "ScaleUpLimit"), (20, "ScaleUp"), (20, "WithinTolerance")]


@pytest.mark.parametrize("new_pod", [loading, stopped], ids=["loading-unready", "ready-but-missing"])
def test_a_burst_keeps_scaling_while_the_new_pods_do_not_answer(new_pod):
    assert burst(new_pod, 4) == FULL_SPEED


def test_a_burst_waits_for_pending_pods():
    """The counterfactual the guard is for: pods without a node would queue behind more pods."""
    assert burst(pending, 3) == [(5, "ScaleUpLimit"), (5, "PendingPods"), (5, "PendingPods")]


def test_a_loading_pod_is_idle_in_the_maths_not_left_out():
    """At 5 pods (1 serving 640, 4 loading) the size comes from the load over all 5, the loading
    ones at 0: 640 / 5 / 32 = 4, so 20 pods (not 640 / 1 / 32 * 5 = 100)."""
    now = START
    pods = [serving("p0", now)] + [loading(f"p{i}", now) for i in range(1, 5)]
    decision = decide(pods, 5, SPEC, History(), now)
    assert decision.ratio == pytest.approx(20.0)
    assert decision.corrected_ratio == pytest.approx(4.0)
    assert decision.raw == 20
    assert [v.assumed for v in decision.pods] == [None, 0.0, 0.0, 0.0, 0.0]
