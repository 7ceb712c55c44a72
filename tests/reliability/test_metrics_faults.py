"""Pods whose /metrics time out, return garbage, NaN or negative values: the real operator (native
autoscaling, a subprocess) must read them as missing, never as zero load, and so never scale down.

The pods are HTTP servers on 127.0.0.2-6 (one each, the fleet's port) that serve a fixed /metrics
text: a fake at the network boundary, which is where the fault is. Pod 0 is an honest idle pod.
The counterfactual: with every pod honest and idle, the same fleet goes 5 -> 1 at its first
decision (downscale window 0), which the last step of the test shows.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tests.fleet_operator.crd_schema import ROOT, load_yaml
from tests.fleet_operator.loopback import free_port, pod_ip
from tests.kit.waiting import wait_for
from tests.reliability.support import IDLE, MetricsPod

BAD_METRICS = {  # pod index -> (what its /metrics answers, the word the operator must report)
    1: (b"<html>502 Bad Gateway</html>\n", "unparseable"),
    2: (b"sglang:num_running_reqs NaN\nsglang:num_queue_reqs 0\n", "invalid value nan"),
    3: (b"sglang:num_running_reqs -4\nsglang:num_queue_reqs 0\n", "invalid value -4"),
    4: (None, "timeout"),  # never answers within the scrape timeout
}
NUM_PODS = 5


@contextlib.contextmanager
def metrics_pods(port: int) -> Iterator[list[MetricsPod]]:
    pods = [MetricsPod(pod_ip(i), port, BAD_METRICS.get(i, (IDLE,))[0]) for i in range(NUM_PODS)]
    for pod in pods:
        pod.thread.start()
    try:
        yield pods
    finally:
        for pod in pods:
            pod.stop()


def fleet_doc(name: str, port: int) -> dict:
    doc = load_yaml(ROOT / "examples" / "minimal.yaml")
    doc["metadata"]["name"] = name
    doc["spec"].update(replicas=NUM_PODS, server={"port": port}, autoscaling={
        "enabled": True, "mode": "native", "minReplicas": 1, "maxReplicas": NUM_PODS,
        "targetLoadPerReplica": 4, "scrapeIntervalSeconds": 1,
        "scaleDown": {"stabilizationWindowSeconds": 0}})
    return doc


def decision(cluster, name: str) -> dict:
    return ((cluster.fleet(name) or {}).get("status") or {}).get("lastDecision") or {}


def test_missing_garbage_nan_and_negative_metrics_never_scale_down(operator, kube_api):
    cluster, name = operator.cluster, "blind"
    port = free_port([pod_ip(i) for i in range(NUM_PODS)])
    labels = {"scoring.fleet.dev/fleet": name}
    with metrics_pods(port) as pods:
        cluster.apply(fleet_doc(name, port))
        for i in range(NUM_PODS):
            kube_api.add_pod("default", f"{name}-{i}", labels, pod_ip(i), port)
        seen: dict[str, dict] = {}

        def collect() -> bool:  # every distinct decision, keyed by its time
            d = decision(cluster, name)
            if d.get("time") and len(d.get("pods") or ()) == NUM_PODS:
                seen[d["time"]] = d
            return len(seen) >= 4
        wait_for(collect, "four decisions over the five pods", timeout_s=20)
        degraded = cluster.condition(name, "MetricsDegraded")
        for d in seen.values():
            assert d["desiredReplicas"] == NUM_PODS and d["reason"] == "MetricsDegraded", d
            loads = [p["load"] for p in d["pods"]]
            assert loads[0] == 0.0 and loads[1:] == ["missing"] * (NUM_PODS - 1), loads
        assert degraded["status"] == "True"
        for i, (_, word) in BAD_METRICS.items():
            assert f"{name}-{i} ({word}" in degraded["message"], degraded["message"]
        assert (cluster.deployment(name) or {})["spec"]["replicas"] == NUM_PODS
        print(f"\n{len(seen)} decisions, all held at {NUM_PODS}; MetricsDegraded: {degraded['message']}")
        # The counterfactual: every pod honest and idle -> the fleet goes to 1.
        for pod in pods:
            pod.body = IDLE
        wait_for(lambda: (cluster.deployment(name) or {})["spec"]["replicas"] == 1,
                 "the scale-down once every pod reports", timeout_s=10)
    operator.assert_alive_without_traceback()
