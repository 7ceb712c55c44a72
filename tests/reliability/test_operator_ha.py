"""Two operator replicas with kopf peering (tests/reliability/ha.py) against the emulator: one writer
at a time; a SIGKILLed leader's fleets taken over within the peering lifetime and a scrape interval,
each decision made once; a SIGTERMed one handing over at once; a leader whose keep-alives stop
landing stops writing. The pods' /metrics are fakes at the network boundary (support.MetricsPod)
whose load the test raises.
"""
from __future__ import annotations

import math
import signal
import time

import pytest

from tests.fleet_operator.loopback import free_port, pod_ip
from tests.fleet_operator.operator_process import Cluster
from tests.kit.waiting import wait_for
from tests.packaging.test_rbac import CLUSTER_PEERING_GRANTS
from tests.reliability.ha import LIFETIME_S, PEERING_PATH, leader, prepare, scale_writes, start_replica, stop_replicas
from tests.reliability.support import IDLE, MetricsPod, fleet_doc
from tests.reliability.test_rbac_used import TEST_CLIENTS, grant_of

pytestmark = pytest.mark.slow

FLEET = "ha"
TARGET = 32
SCRAPE_S = 1


def load(per_pod: int) -> bytes:
    """A pod's gauges: half running, half waiting."""
    return f"sglang:num_running_reqs {per_pod // 2}\nsglang:num_queue_reqs {per_pod - per_pod // 2}\n".encode()


def native_fleet(port: int) -> dict:
    doc = fleet_doc(FLEET, replicas=1)
    doc["spec"].update(server={"port": port}, autoscaling={
        "enabled": True, "mode": "native", "minReplicas": 1, "maxReplicas": 8,
        "targetLoadPerReplica": TARGET, "scrapeIntervalSeconds": SCRAPE_S})
    return doc


def replicas(cluster: Cluster) -> int | None:
    return ((cluster.fleet(FLEET) or {}).get("spec") or {}).get("replicas")


@pytest.fixture()
def pods():
    port = free_port([pod_ip(i) for i in range(4)])
    made = [MetricsPod(pod_ip(i), port, IDLE) for i in range(4)]
    for pod in made:
        pod.thread.start()
    yield port, made
    for pod in made:
        pod.stop()


@pytest.fixture()
def pair(kube_api, tmp_path):
    """Replica a started first (so it ranks higher and leads), then b; both stopped after."""
    prepare(kube_api)
    started = [start_replica(kube_api, tmp_path, "op-a")]
    try:
        wait_for(lambda: leader(kube_api) == "op-a", "op-a leading", timeout_s=20)
        started.append(start_replica(kube_api, tmp_path, "op-b"))
        wait_for(lambda: started[1].health()[0] == 200, "op-b's /healthz", timeout_s=20)
        yield started
    finally:
        stop_replicas(started)


def add_pod(kube_api, index: int, port: int) -> None:
    kube_api.add_pod("default", f"{FLEET}-{index}", {"scoring.fleet.dev/fleet": FLEET}, pod_ip(index), port)


def fleet_with_one_pod(kube_api, port: int) -> Cluster:
    """The native fleet applied, its first pod serving the metrics on `port`."""
    cluster = Cluster(kube_api)
    cluster.apply(native_fleet(port))
    add_pod(kube_api, 0, port)
    return cluster


def test_one_writer_and_a_sigkilled_leader_is_taken_over(kube_api, pair, pods):
    a, b = pair
    port, metrics = pods
    cluster = fleet_with_one_pod(kube_api, port)
    both_live = time.monotonic()
    wait_for(lambda: ((cluster.fleet(FLEET) or {}).get("status") or {}).get("lastDecision"),
             "a first decision", timeout_s=20)
    # Load rising: 64 on one pod -> 2 pods (ceil(64 / 32)), decided by the leader.
    metrics[0].body = load(64)
    wait_for(lambda: replicas(cluster) == 2, "the leader's scale-up to 2")
    add_pod(kube_api, 1, port)
    time.sleep(2 * SCRAPE_S)  # both live, a few more decisions
    assert a.writes(kube_api, both_live), "the leader wrote nothing"
    assert b.writes(kube_api, both_live) == [], "the standby wrote while the leader lived"
    assert a.health() == (200, {"leading": True}) and b.health() == (200, {"leading": False})
    assert "op-a" in cluster.kubectl("get", "clusterkopfpeering")  # the Leader column

    # The leader dies while the load keeps rising: 2 pods at 64 each -> 4 pods.
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    killed = time.monotonic()
    for pod in metrics[:2]:
        pod.body = load(64)
    wait_for(lambda: replicas(cluster) == math.ceil(2 * 64 / TARGET), "op-b's scale-up to 4",
             timeout_s=LIFETIME_S + SCRAPE_S + 5)
    taken_over_s = time.monotonic() - killed
    print(f"\nSIGKILL -> the standby's scale-up: {taken_over_s:.1f} s (lifetime {LIFETIME_S} s, "
          f"scrape interval {SCRAPE_S} s)")
    assert leader(kube_api) == "op-b"
    assert a.writes(kube_api, killed) == []
    # Each rescale written once: 1 -> 2 by a, 2 -> 4 by b (a second 1 -> 2 would be a third write).
    writers = [r.user_agent.rsplit("/", 1)[1] for r in scale_writes(kube_api, both_live, FLEET)]
    assert writers == ["op-a", "op-b"], writers
    assert "Traceback" not in b.log()
    # The peering's calls (kopf's and ours; discovery aside) are exactly what the chart grants for it.
    peering_calls = {grant_of(r.method, r.path) for r in kube_api.requests(0)
                     if "/kopf.dev/" in r.path and not TEST_CLIENTS.match(r.user_agent)} - {None}
    assert peering_calls == {(group, resource, verb) for (group, resource), verbs in
                             CLUSTER_PEERING_GRANTS.items() for verb in verbs}


def test_sigterm_hands_over_at_once(kube_api, pair, pods):
    a, b = pair
    port, _ = pods
    fleet_with_one_pod(kube_api, port)
    wait_for(lambda: a.writes(kube_api, 0), "the leader's first write", timeout_s=20)
    a.proc.send_signal(signal.SIGTERM)
    stopping = time.monotonic()
    wait_for(lambda: b.writes(kube_api, stopping), "the standby's first write", timeout_s=10)
    handed_over_s = b.writes(kube_api, stopping)[0].monotonic_s - stopping
    print(f"\nSIGTERM -> the standby's first write: {handed_over_s:.1f} s")
    assert handed_over_s < 5
    assert a.proc.wait(timeout=10) == 0
    last_a = max((r.monotonic_s for r in a.writes(kube_api, 0)), default=0)
    first_b = min(r.monotonic_s for r in b.writes(kube_api, 0))
    assert last_a < first_b, "the two replicas' writes overlapped"


def test_a_leader_whose_keep_alives_fail_stops_writing(kube_api, pair, pods):
    a, b = pair
    port, metrics = pods
    cluster = fleet_with_one_pod(kube_api, port)
    wait_for(lambda: a.writes(kube_api, 0), "the leader's first write", timeout_s=20)
    # Only the leader's keep-alives fail (kopf's PATCH names its own entry): op-b stays live and
    # takes over. Were both failing, the first whose keep-alive lands again would lead, either one.
    rule = kube_api.inject("PATCH", f"{PEERING_PATH}$", 500, times=None, body_regex=f'"{a.identity}":')
    failing = time.monotonic()
    metrics[0].body = load(64)  # the leader may still act on this within its lease, never after
    time.sleep(LIFETIME_S + 2)
    blind = [r for r in a.writes(kube_api, failing + LIFETIME_S)]
    assert blind == [], f"the leader wrote after its lease ended: {blind}"
    assert rule.hits > 0
    assert a.health()[0] == 200, "liveness must hold while paused"
    kube_api.clear_faults()
    # Keep-alives land again: the replica that lost its lease stays a standby; b, which took over, decides.
    healed = time.monotonic()
    metrics[0].body = load(128)
    wait_for(lambda: b.writes(kube_api, healed), "op-b taking over", timeout_s=30)
    assert "Lost the lease" in a.log()
    wait_for(lambda: (replicas(cluster) or 0) >= 3, "op-b's scale-up", timeout_s=10)
    assert a.writes(kube_api, healed) == []
