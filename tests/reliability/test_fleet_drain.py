"""Scale-in that loses nothing, end to end against the API emulator playing the kubelet (a deleted
pod: deletionTimestamp, not ready, SIGTERM to its server, removed when the server exits).

Three paced scoring servers (tests/reliability/fleet.py) are the fleet's pods, `python -m gateway
--fleet` is in front, and an open loop sends steady traffic through it. (a) The real operator
scales the fleet 3 -> 1 as the load drops: the two idlest pods carry the lowest deletion costs and
are the ones removed, and every request gets 200. (b) One pod is deleted (kubectl) while it has
requests in flight: every request gets 200; in the slow tier, two at once at 5x the rate. Run
with -s for the counts by status.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import httpx
import pytest

from gateway.metrics import PREFIX as G
from gateway.poller import parse_load
from tests.gateway.support import gateway_process, sample
from tests.kit.waiting import wait_for
from tests.reliability.fleet import NS, PodWatcher, Stream, Traffic, fleet_pods
from tests.reliability.support import fleet_doc

STEADY_PER_S = 20  # the open loop through the gateway: requests/s, all along
TARGET = 12  # targetLoadPerReplica: 8 x 2 + 4 x 2 + the steady ~2 = ~26 -> 3 pods; without the burst ~10 -> 1
AUTOSCALING = {"enabled": True, "mode": "native", "minReplicas": 1, "maxReplicas": 3,
               "targetLoadPerReplica": TARGET, "scrapeIntervalSeconds": 1,
               "scaleDown": {"stabilizationWindowSeconds": 2}}
SCALE_IN_S = 20.0  # load drop -> the two pods drained and gone: the 2 s window, a tick, the drain


def report(title: str, streams: list[Stream], gateway: str) -> None:
    retries = {reason: sample(gateway, f"{G}_retries_total", reason=reason)
               for reason in ("503", "draining", "refused", "connect-timeout", "reset")}
    print(f"\n{title}")
    for stream in streams:
        print(f"  {stream.name}: {len(stream.answers)} requests, by status {dict(stream.by_status())}")
    print(f"  gateway retries: {retries}")


def assert_all_200(streams: list[Stream]) -> None:
    for stream in streams:
        assert stream.answers, f"{stream.name} sent nothing"
        failed = [a for a in stream.answers if a.status != 200]
        assert not failed, f"{stream.name}: {len(failed)} of {len(stream.answers)} not 200: {failed[:5]}"


def _num_reqs(url: str) -> int:
    return parse_load(httpx.get(f"{url}/get_load", timeout=2).json())


@contextlib.contextmanager
def fleet_behind_gateway(kube_api, name: str, tmp_path) -> Iterator[tuple]:
    """(servers, gateway URL, pod watcher): three paced servers as fleet `name`'s pods and
    `python -m gateway --fleet name` in front, once the gateway has all three in rotation."""
    with fleet_pods(kube_api, name, 3, tmp_path) as servers, \
            gateway_process("--fleet", name, "--namespace", NS, log_path=tmp_path / "gateway.log",
                            env=kube_api.env) as gateway, \
            PodWatcher(kube_api, name) as pods:
        wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 3, timeout_s=15)
        yield servers, gateway, pods


def last_decision(cluster, name: str) -> dict:
    return ((cluster.fleet(name) or {}).get("status") or {}).get("lastDecision") or {}


def test_a_fleet_scaling_in_under_load_loses_no_request_and_the_idlest_pods_go(
        operator, kube_api, tmp_path):
    cluster, name = operator.cluster, "shrink"
    with fleet_behind_gateway(kube_api, name, tmp_path) as (servers, gateway, pods):
        steady = Stream("steady (open loop, gateway)", gateway, num_items=1, rate_per_s=STEADY_PER_S)
        burst = Stream("burst (8 clients, gateway)", gateway, num_items=2, concurrency=8)
        # pod 2 is kept the busiest: the one a ReplicaSet left to itself removes first (newest name)
        busy = Stream(f"busy (4 clients, {name}-2 direct)", servers.url(2), num_items=2, concurrency=4)
        with Traffic(steady, burst, busy):
            doc = fleet_doc(name, replicas=3)
            doc["spec"].update(server={"port": servers.port}, autoscaling=AUTOSCALING)
            cluster.apply(doc)
            wait_for(lambda: last_decision(cluster, name).get("desiredReplicas") == 3,
                     "a decision at 3 under the burst", timeout_s=15)
            burst.stopped.set()  # the load drops
            wait_for(lambda: len(pods.gone) == 2, "two pods scaled in and gone", timeout_s=SCALE_IN_S)
            num_answers = len(steady.answers)
            wait_for(lambda: len(steady.answers) >= num_answers + STEADY_PER_S,
                     "a second more of steady traffic on the one pod left")
        report("scale-in 3 -> 1 under load", [steady, burst, busy], gateway)

    assert_all_200([steady, burst, busy])
    assert cluster.deployment(name)["spec"]["replicas"] == 1
    # The idlest went: when each removed pod began terminating, its deletion cost was below the
    # survivor's (the busy pod, which a ReplicaSet left to itself would have removed first).
    # (3 -> 1 in one step, or 3 -> 2 -> 1 when a decision sampled the burst winding down.)
    survivor = f"{name}-2"
    assert sorted(pods.gone) == [f"{name}-0", f"{name}-1"]
    for pod, costs in pods.costs_when_deleted.items():
        assert int(costs[pod]) < int(costs[survivor]), (pod, costs)
    # each scale-down said which pods it expected to go: exactly those went
    events = cluster.events(name, "ScaleDown")
    for event in events:
        print(f"  Event ScaleDown: {event['message'].split(':')[0]}, ...; "
              f"{event['message'].split('; ')[-1]}")
    print(f"  deletion costs when each removed pod began terminating: {pods.costs_when_deleted}")
    expected = [pod for event in events
                for pod in event["message"].split("expected to go (idlest first): ")[1].split(", ")]
    assert sorted(expected) == sorted(pods.gone)
    for i in (0, 1):  # each drained what it had admitted and exited 0
        assert servers.procs[i].returncode == 0 and "drained in" in servers.log(i)


def test_a_pod_deleted_under_load_loses_no_request(kube_api, tmp_path):
    name = "cut"
    with fleet_behind_gateway(kube_api, name, tmp_path) as (servers, gateway, pods):
        steady = Stream("steady (open loop, gateway)", gateway, num_items=2, rate_per_s=STEADY_PER_S)
        with Traffic(steady):
            # the pod to delete has admitted work in flight
            wait_for(lambda: sample(gateway, f"{G}_routed_total", worker=servers.url(1)) >= 5
                       and _num_reqs(servers.url(1)) > 0, timeout_s=15, interval_s=0.01)
            kube_api.kubectl("delete", "pod", f"{name}-1", "--wait=false")
            wait_for(lambda: pods.gone == [f"{name}-1"], "the deleted pod drained and gone", timeout_s=15)
            num_answers = len(steady.answers)
            wait_for(lambda: len(steady.answers) >= num_answers + STEADY_PER_S,
                     "a second more of steady traffic on the two pods left")
        report("one pod deleted under load", [steady], gateway)

    assert_all_200([steady])
    assert servers.procs[1].returncode == 0 and "drained in" in servers.log(1)


@pytest.mark.slow
def test_two_pods_deleted_at_once_under_heavier_load_lose_no_request(kube_api, tmp_path):
    # A scale-in's worst moment at 5x the rate: two of three pods begin draining in the same
    # instant, and requests reach them before the gateway's watch drops them.
    name = "pair"
    with fleet_behind_gateway(kube_api, name, tmp_path) as (servers, gateway, pods):
        steady = Stream("steady (open loop, gateway)", gateway, num_items=1,
                        rate_per_s=5 * STEADY_PER_S)
        with Traffic(steady):
            wait_for(lambda: len(steady.answers) >= 2 * STEADY_PER_S, timeout_s=15)
            deleting = [threading.Thread(target=kube_api.request,
                                         args=("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}-{i}"))
                        for i in (0, 1)]
            for thread in deleting:
                thread.start()
            for thread in deleting:
                thread.join()
            wait_for(lambda: len(pods.gone) == 2, "both pods drained and gone", timeout_s=15)
            num_answers = len(steady.answers)
            wait_for(lambda: len(steady.answers) >= num_answers + 5 * STEADY_PER_S,
                     "a second more of traffic on the one pod left")
        report("two pods deleted at once, 100 requests/s", [steady], gateway)

    assert_all_200([steady])
    assert [servers.procs[i].returncode for i in (0, 1)] == [0, 0]
