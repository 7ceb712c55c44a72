"""Scale-in, idlest first: the pure cost and expectation functions as tables (scale_in.py), then the
real tick against the emulator: five pods with uneven load shrink to three, the two idlest carry the
lowest deletion costs when the Deployment shrinks, and the emulator's ReplicaSet order removes them."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest

from fleet_operator import kube, tick as tick_module
from fleet_operator.autoscaling.decide import decide
from fleet_operator.autoscaling.history import History
from fleet_operator.autoscaling.scale_in import (
    DELETION_COST,
    MAX_COST,
    cost_patches,
    deletion_costs,
    pods_expected_to_go,
    with_pods_to_go,
)
from fleet_operator.autoscaling.values import PodSample, PodVerdict
from fleet_operator.context import OperatorContext
from fleet_operator.reconcile import reconcile_fleet
from fleet_operator.spec.autoscaling import AutoscalingSpec
from tests.fleet_operator.loopback import pod_ip
from tests.fleet_operator.test_tick import (
    NAME,
    NATIVE,
    T0,
    MetricsPods,
    make_fleet,
    tick,
)
from tests.kit.waiting import wait_for


def sample(name: str, load: float) -> PodVerdict:
    return PodVerdict(name, "sample", load)


def other(name: str, status: str) -> PodVerdict:
    return PodVerdict(name, status, None, status)


@pytest.mark.parametrize("verdicts,costs", [
    ([sample("a", 9), sample("b", 0), sample("c", 4)], {"a": 2, "b": 0, "c": 1}),
    # equal loads: ranked by name, so no two pods tie (the ReplicaSet's own tie-break never decides)
    ([sample("b", 0), sample("a", 0)], {"a": 0, "b": 1}),
    # no fresh sample: never taken for idle (a naive rule reading missing as 0 would remove it first)
    ([sample("a", 5), other("b", "missing")], {"a": 0, "b": MAX_COST}),
    ([other("a", "pending"), other("b", "unready"), sample("c", 1)],
     {"a": MAX_COST, "b": MAX_COST, "c": 0}),
    # being deleted or finished: not the ReplicaSet's to choose any more
    ([other("a", "ignored"), sample("b", 3)], {"b": 0}),
    ([], {}),
], ids=["by-load", "ties-by-name", "missing-last", "not-ready-last", "ignored-left-out", "no-pods"])
def test_deletion_costs(verdicts, costs):
    assert deletion_costs(verdicts) == costs


@pytest.mark.parametrize("verdicts,desired,to_go", [
    ([sample("a", 9), sample("b", 0), sample("c", 4), sample("d", 1), sample("e", 7)], 3, ("b", "d")),
    # a missing pod stays, though its load might be 0
    ([sample("a", 9), other("b", "missing"), sample("c", 4)], 2, ("c",)),
    # not-ready pods go before any ready one, whatever their cost (the ReplicaSet's first ranks)
    ([sample("a", 0), other("b", "unready"), other("c", "pending"), sample("d", 5)], 2, ("c", "b")),
    # a pod already being deleted is not surplus: 3 counted, 2 wanted, one more goes
    ([other("a", "ignored"), sample("b", 2), sample("c", 1), sample("d", 3)], 2, ("c",)),
    ([sample("a", 1), sample("b", 2)], 2, ()),
], ids=["two-idlest", "missing-stays", "not-ready-first", "deleting-not-surplus", "no-surplus"])
def test_pods_expected_to_go(verdicts, desired, to_go):
    assert pods_expected_to_go(verdicts, desired) == to_go


@pytest.mark.parametrize("current,patches", [
    ({"a": "0", "b": None}, {"b": "1"}),  # a already carries its cost
    ({"a": "5", "b": "1"}, {"a": "0"}),
    ({"a": "0", "b": "1"}, {}),  # nothing changes: no write at all
    ({"b": "7"}, {"b": "1"}),  # a is gone (not in the listing): skipped
], ids=["absent", "changed", "unchanged", "gone"])
def test_cost_patches_only_where_the_cost_changes(current, patches):
    assert cost_patches({"a": 0, "b": 1}, current) == patches


SPEC = AutoscalingSpec(enabled=True, target_load_per_replica=10, max_replicas=5)


def decision_for(loads: list[float], current: int):
    pods = [PodSample(f"p{i}", "Running", True, load=load, scraped_at=T0) for i, load in enumerate(loads)]
    return with_pods_to_go(decide(pods, current, SPEC, History(), T0))


def test_a_scale_down_says_which_pods_it_expects_to_go():
    down = decision_for([0, 12, 2, 8], 4)  # 22 / 10 -> 3
    assert (down.desired_replicas, down.pods_to_go) == (3, ("p0",))
    assert down.message.endswith("; expected to go (idlest first): p0")
    assert down.to_status()["podsToGo"] == ["p0"]


def test_no_scale_down_expects_nothing_to_go():
    up = decision_for([0, 35, 5], 3)  # 40 / 10 -> 4
    assert (up.desired_replicas, up.pods_to_go) == (4, ())
    assert "podsToGo" not in up.to_status() and "expected to go" not in up.message


# ---- five pods with uneven load shrink to three, through the real tick ----

LOADS = {0: (6.0, 6.0), 1: (1.0, 0.0), 2: (4.0, 5.0), 3: (0.0, 0.0), 4: (2.0, 6.0)}  # 12, 1, 9, 0, 8


@pytest.fixture()
def five_pods():
    pods = MetricsPods(5)
    yield pods
    pods.close()


def pod_names(kube_api) -> list[str]:
    _, answer = kube_api.request("GET", "/api/v1/namespaces/default/pods")
    return sorted(p["metadata"]["name"] for p in answer["items"])


def test_five_pods_with_uneven_load_shrink_to_three_and_the_two_idlest_go(kube_api, five_pods):
    api = kube_api.client()
    make_fleet(kube_api, api, five_pods, replicas=5)
    for i, gauges in LOADS.items():
        five_pods.gauges[pod_ip(i)] = gauges
    # an earlier annotation that would make the busiest pod go first is corrected
    kube_api.request("PATCH", f"/api/v1/namespaces/default/pods/{NAME}-0",
                     {"metadata": {"annotations": {DELETION_COST: "-100"}}},
                     content_type="application/merge-patch+json")

    result = tick(api)  # load 30, target 10: 3 pods

    idlest = (f"{NAME}-3", f"{NAME}-1")
    assert (result.decision.desired_replicas, result.decision.pods_to_go) == (3, idlest)
    costs = {p["metadata"]["name"]: p["metadata"]["annotations"][DELETION_COST]
             for p in kube.list_fleet_pods(api, "default", NAME)}
    assert costs == {f"{NAME}-3": "0", f"{NAME}-1": "1", f"{NAME}-4": "2", f"{NAME}-2": "3",
                     f"{NAME}-0": "4"}
    status = kube.get_fleet(api, "default", NAME)["status"]["lastDecision"]
    assert status["podsToGo"] == list(idlest)
    # the reconciler carries 3 to the Deployment; the emulator's ReplicaSet order removes the idlest
    reconcile_fleet(OperatorContext(api, clock=lambda: T0 + timedelta(seconds=1)), "default", NAME)
    wait_for(lambda: pod_names(kube_api) == [f"{NAME}-0", f"{NAME}-2", f"{NAME}-4"],
             "the two idlest pods removed", timeout_s=5)
    # the counterfactual: without the costs the ReplicaSet would remove the newest, -4 and -3


def test_costs_are_written_only_where_they_change(kube_api, five_pods):
    api = kube_api.client()
    make_fleet(kube_api, api, five_pods, replicas=2, num_pods=2,
               autoscaling={**NATIVE, "minReplicas": 1})
    kube_api.request("PATCH", f"/api/v1/namespaces/default/pods/{NAME}-0",
                     {"metadata": {"annotations": {DELETION_COST: "0"}}},
                     content_type="application/merge-patch+json")
    start = time.monotonic()
    result = tick(api)  # both idle: 2 -> 1
    assert result.decision.pods_to_go == (f"{NAME}-0",)
    patched = [r.path for r in kube_api.requests(start, method="PATCH") if "/pods/" in r.path]
    assert patched == [f"/api/v1/namespaces/default/pods/{NAME}-1"]  # -0 already carried "0"


def test_a_decision_dropped_for_a_changed_fleet_writes_no_deletion_cost(kube_api, five_pods, monkeypatch):
    api = kube_api.client()
    make_fleet(kube_api, api, five_pods, replicas=2, num_pods=2,
               autoscaling={**NATIVE, "minReplicas": 1})

    def decide_then_edit(*args, **kwargs):  # someone edits the spec while the tick decides
        kube_api.request("PATCH", f"/apis/scoring.fleet.dev/v1alpha1/namespaces/default/scoringfleets/{NAME}",
                         {"spec": {"image": "scoring-fleet:0.1.1"}}, content_type="application/merge-patch+json")
        return with_pods_to_go(*args, **kwargs)

    monkeypatch.setattr(tick_module, "with_pods_to_go", decide_then_edit)
    start = time.monotonic()
    assert tick(api) is None  # both idle: 2 -> 1, but the fleet's generation moved
    assert [r.path for r in kube_api.requests(start, method="PATCH") if "/pods/" in r.path] == []
    assert all(DELETION_COST not in (p["metadata"].get("annotations") or {})
               for p in kube.list_fleet_pods(api, "default", NAME))
