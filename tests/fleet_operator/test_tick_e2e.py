"""Native autoscaling end to end: the real operator, real scoring servers, real load.

The operator runs as a subprocess (`python -m fleet_operator --standalone -A`) against the emulator.
NUM_SERVERS scoring servers (`python -m server` on the tiny random Llama of tests/server/support.py)
listen on 127.0.0.2, .3, .4 at the fleet's port, started once for the module. The test plays the
Deployment controller and the kubelet (Kubelet): it keeps Pods <fleet>-0 .. n-1, Running and ready
with podIP 127.0.0.(i+2), for n = the Deployment's spec.replicas, so pod i is server i. The load
(ClosedLoopLoad) keeps CONCURRENCY requests of ITEMS items outstanding over the live pods; each
server runs at most MAX_RUNNING sequences at once, so the rest wait in its queue and the fleet's
running + waiting is about CONCURRENCY * ITEMS whatever its size. Every wait is a bounded poll.
"""
from __future__ import annotations

import asyncio
import contextlib
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.server_process import stop
from tests.fleet_operator.crd_schema import ROOT, load_yaml
from tests.fleet_operator.loopback import free_port, pod_ip
from tests.fleet_operator.operator_process import Cluster
from tests.kit.models import build_tiny_model
from tests.kit.waiting import wait_for

NUM_SERVERS = 3  # the fleet never needs more: 3 is the size the load asks for
MAX_RUNNING = 2  # --max-running-requests: the servers, not the client, are the bottleneck
CONCURRENCY, ITEMS, ITEM_TOKENS = 10, 2, 200  # 20 sequences outstanding
INTERVAL_S = 1  # scrapeIntervalSeconds
DOWN_WINDOW_S = 3  # scaleDown.stabilizationWindowSeconds
TARGET = 7  # targetLoadPerReplica: 20 sequences -> ceil(20 / 7) = 3 pods
MIN_REPLICAS, MAX_REPLICAS = 1, 4  # room above 3, so that an overshoot would show
SLACK_S = 3.0  # API round trips, the Deployment write, kubectl: on top of the scrape intervals
MAX_LOAD_S = 60.0  # no load or kubelet loop outlives this, whatever the test does


# ---- the scoring servers (module scope) ----

@dataclass
class ScoringServers:
    hosts: list[str]
    port: int
    procs: list[subprocess.Popen]

    @contextlib.contextmanager
    def frozen(self, index: int) -> Iterator[None]:
        """Server `index` hangs (SIGSTOP): its /metrics stops answering until the block ends."""
        self.procs[index].send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            self.procs[index].send_signal(signal.SIGCONT)


def _healthy(host: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health_generate", timeout=1) as answer:
            return answer.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScoringServers]:
    folder = tmp_path_factory.mktemp("servers")
    model = build_tiny_model(folder / "model")
    hosts = [pod_ip(i) for i in range(NUM_SERVERS)]
    port = free_port(hosts)
    # One thread each: NUM_SERVERS processes share two CPUs here (torch's default is one per core).
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = []
    try:
        for host in hosts:
            with open(folder / f"{host}.log", "w") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "server", "--model-path", str(model), "--host", host,
                     "--port", str(port), "--max-running-requests", str(MAX_RUNNING),
                     "--num-threads", "1", "--dtype", "float32"],
                    cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT))
        wait_for(lambda: all(_healthy(h, port) for h in hosts), "the scoring servers", timeout_s=60)
        yield ScoringServers(hosts, port, procs)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGCONT)  # a test may have frozen it
            proc.terminate()
        for proc in procs:
            stop(proc)


def total_load(hosts: list[str], port: int) -> float:
    """running + waiting summed over `hosts`, read by the test itself from each server's /metrics."""
    total = 0.0
    for host in hosts:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=2) as answer:
            text = answer.read().decode()
        total += sum(s.value for family in text_string_to_metric_families(text)
                     for s in family.samples
                     if s.name in ("sglang:num_running_reqs", "sglang:num_queue_reqs"))
    return total


# ---- the test's kubelet and load ----

class Kubelet:
    """Pods <fleet>-0 .. n-1 for n = the Deployment's spec.replicas, pod i at 127.0.0.(i+2).

    Records every replica count it acted on, with the time since start (the observed sequence).
    """

    def __init__(self, kube_api: Any, fleet: str, port: int) -> None:
        self.kube_api, self.fleet, self.port = kube_api, fleet, port
        self.hosts: list[str] = []  # the live pods' IPs, read by the load
        self.seen: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kubelet", daemon=True)
        self._t0 = time.monotonic()

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(0.05) and time.monotonic() - self._t0 < MAX_LOAD_S:
            status, dep = self.kube_api.request(
                "GET", f"/apis/apps/v1/namespaces/default/deployments/{self.fleet}")
            if status == 200:  # (no pod beyond the servers: a 4th would only fail the test later)
                self._sync(min(dep["spec"]["replicas"], NUM_SERVERS))

    def _sync(self, replicas: int) -> None:
        labels = {"scoring.fleet.dev/fleet": self.fleet}
        for i in range(len(self.hosts), replicas):
            self.kube_api.add_pod("default", f"{self.fleet}-{i}", labels, pod_ip(i), self.port)
        for i in reversed(range(replicas, len(self.hosts))):
            self.kube_api.request("DELETE", f"/api/v1/namespaces/default/pods/{self.fleet}-{i}")
        self.hosts = [pod_ip(i) for i in range(replicas)]
        if not self.seen or self.seen[-1][1] != replicas:
            self.seen.append((round(time.monotonic() - self._t0, 2), replicas))


@dataclass
class ClosedLoopLoad:
    """`concurrency` workers, each with one request of `items` items outstanding at all times,
    sent round robin to the live pods, until stopped (or MAX_LOAD_S)."""

    kubelet: Kubelet
    port: int
    concurrency: int = CONCURRENCY
    items: int = ITEMS
    statuses: dict[int, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> ClosedLoopLoad:
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), name="load")
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    async def _main(self) -> None:
        deadline = time.monotonic() + MAX_LOAD_S
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            await asyncio.gather(*(self._worker(session, n, deadline) for n in range(self.concurrency)))

    async def _worker(self, session: aiohttp.ClientSession, n: int, deadline: float) -> None:
        body = {"query": [5, 6, 7], "label_token_ids": [1, 2],
                "items": [[10 + (n + j + t) % 300 for t in range(ITEM_TOKENS)] for j in range(self.items)]}
        sent = 0
        while not self._stop.is_set() and time.monotonic() < deadline:
            hosts = self.kubelet.hosts
            if not hosts:
                await asyncio.sleep(0.05)
                continue
            host = hosts[(n + sent) % len(hosts)]
            sent += 1
            async with session.post(f"http://{host}:{self.port}/v1/score", json=body) as answer:
                await answer.read()
                self.statuses[answer.status] = self.statuses.get(answer.status, 0) + 1


# ---- the fleet ----

def fleet_doc(name: str, port: int, replicas: int, down_window_s: int) -> dict:
    doc = load_yaml(ROOT / "examples" / "minimal.yaml")
    doc["metadata"]["name"] = name
    doc["spec"].update(replicas=replicas, server={"port": port, "maxRunningRequests": MAX_RUNNING},
                       autoscaling={
                           "enabled": True, "mode": "native", "minReplicas": MIN_REPLICAS,
                           "maxReplicas": MAX_REPLICAS, "targetLoadPerReplica": TARGET,
                           "scrapeIntervalSeconds": INTERVAL_S,
                           "scaleDown": {"stabilizationWindowSeconds": down_window_s}})
    return doc


def replicas(cluster: Cluster, name: str) -> tuple[int | None, int | None]:
    """(the fleet's scale subresource's spec.replicas, the Deployment's spec.replicas)."""
    code, scale = cluster.api.request(
        "GET", f"/apis/scoring.fleet.dev/v1alpha1/namespaces/default/scoringfleets/{name}/scale")
    dep = cluster.deployment(name) or {}
    return (scale["spec"].get("replicas") if code == 200 else None,
            dep.get("spec", {}).get("replicas"))


def last_decision(cluster: Cluster, name: str) -> dict:
    return ((cluster.fleet(name) or {}).get("status") or {}).get("lastDecision") or {}


def until(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.1)


def check_explained_under_load(cluster: Cluster, name: str, size: int) -> None:
    """At `size` pods under load: lastDecision, `kubectl get sf` and `kubectl describe` explain it."""
    decision = wait_for(lambda: (d := last_decision(cluster, name)).get("currentReplicas") == size
                        and len(d["pods"]) == size and d, f"a decision at {size} pods")
    for stage in ("raw", "stabilized", "rateLimited", "clamped", "reason", "ratio", "totalLoad"):
        assert stage in decision
    assert all(isinstance(p["load"], float) for p in decision["pods"])  # each pod's own sample
    header, row = cluster.kubectl("get", "sf", name).splitlines()
    columns = dict(zip(header.split(), row.split()))
    assert columns["DESIRED"] == str(size) and columns["REASON"] == decision["reason"]
    assert int(columns["RUNNING"]) > 0 and int(columns["WAITING"]) > 0
    described = cluster.kubectl("describe", f"sf/{name}")
    for text in ("MetricsAvailable", "MetricsDegraded", "ScalingLimited", "Last Decision",
                 "ScaleUp", f"1 -> {size}: load above target"):
        assert text in described, f"{text!r} not in kubectl describe:\n{described}"


def test_a_load_step_scales_the_fleet_up_and_its_end_back_to_min(cluster, servers):
    name = "step"
    with Kubelet(cluster.api, name, servers.port) as kubelet:
        cluster.apply(fleet_doc(name, servers.port, replicas=1, down_window_s=DOWN_WINDOW_S))
        # Before the load: the autoscaler decides at one idle pod (and holds it: minReplicas).
        wait_for(lambda: last_decision(cluster, name).get("pods"), "a first decision with a pod",
                 timeout_s=15)
        with ClosedLoopLoad(kubelet, servers.port) as load:
            step_at = time.monotonic()
            # The load as the pods report it, sampled by the test itself.
            wait_for(lambda: total_load(kubelet.hosts, servers.port) >= 0.75 * CONCURRENCY * ITEMS,
                     "the load to reach the servers")
            sampled = statistics.median(total_load(kubelet.hosts, servers.port) for _ in range(5))
            # The default scale-up policy (max of +4 pods, +100 % per 15 s) allows 1 -> 5 at once.
            rate_limit = max(1 + 4, 1 * 2)
            expected = min(math.ceil(sampled / TARGET), rate_limit, MAX_REPLICAS)
            assert expected == math.ceil(CONCURRENCY * ITEMS / TARGET) == 3
            wait_for(lambda: replicas(cluster, name) == (expected, expected),
                     f"spec.replicas and the Deployment at {expected}",
                     timeout_s=until(step_at + 3 * INTERVAL_S + SLACK_S))
            up_s = time.monotonic() - step_at
            wait_for(lambda: len(kubelet.hosts) == expected, "the new pods")
            check_explained_under_load(cluster, name, expected)
        stop_at = time.monotonic()
        assert set(load.statuses) == {200}, load.statuses
        # (b) After the load, the down window holds the size, then it falls to minReplicas.
        wait_for(lambda: replicas(cluster, name) == (MIN_REPLICAS, MIN_REPLICAS),
                 f"the fleet back at {MIN_REPLICAS}",
                 timeout_s=until(stop_at + DOWN_WINDOW_S + 3 * INTERVAL_S + SLACK_S))
        down_s = time.monotonic() - stop_at
        wait_for(lambda: len(kubelet.hosts) == MIN_REPLICAS, "the pods to go")
    reasons = [e["reason"] for e in cluster.events(name, "ScaleDownStabilized")]
    assert reasons, "the scale-down went through the stabilization window"
    sizes = [n for _, n in kubelet.seen]
    # Up in one step; then down, possibly in two: a dip of the load while it ran (the client
    # thread shares the machine) may leave a lower recommendation in the down window.
    assert sizes[:2] == [1, expected] and sizes[-1] == MIN_REPLICAS
    assert sizes[1:] == sorted(sizes[1:], reverse=True), sizes
    print(f"\nload sampled {sampled:g} sequences -> expected {expected}; replicas seen (s, n): "
          f"{kubelet.seen}; up {up_s:.2f} s after the step, down {down_s:.2f} s after the load "
          f"stopped (window {DOWN_WINDOW_S} s); requests {load.statuses}")


def test_a_silent_pod_blocks_the_scale_down_and_sets_metrics_degraded(cluster, servers):
    name = "silent"
    # Three idle pods, no down window: with every pod answering this is 3 -> 1 at the first decision.
    with Kubelet(cluster.api, name, servers.port) as kubelet:
        with servers.frozen(2):
            cluster.apply(fleet_doc(name, servers.port, replicas=3, down_window_s=0))
            degraded = wait_for(
                lambda: cluster.condition(name, "MetricsDegraded").get("status") == "True"
                and cluster.condition(name, "MetricsDegraded"), "MetricsDegraded=True", timeout_s=15)
            assert f"{name}-2 (timeout" in degraded["message"]
            # Three more decisions, all held at 3.
            times = {last_decision(cluster, name)["time"]}
            wait_for(lambda: times.add(last_decision(cluster, name)["time"]) or len(times) >= 4,
                     "three more decisions", timeout_s=2 * 3 * INTERVAL_S + SLACK_S)
            decision = last_decision(cluster, name)
            assert (decision["reason"], decision["raw"], decision["desiredReplicas"]) == \
                ("MetricsDegraded", 1, 3)
            assert decision["pods"][2]["load"] == "missing" and decision["metricsDegraded"] is True
            assert replicas(cluster, name) == (3, 3)
            [warning] = cluster.events(name, "MetricsDegraded")
            assert warning["type"] == "Warning"
        # The counterfactual: once pod 2 answers again, the idle fleet goes to minReplicas.
        wait_for(lambda: replicas(cluster, name) == (MIN_REPLICAS, MIN_REPLICAS),
                 "the scale-down once every pod answers", timeout_s=3 * INTERVAL_S + SLACK_S)
        wait_for(lambda: len(kubelet.hosts) == MIN_REPLICAS, "the pods to go")
    assert [n for _, n in kubelet.seen] == [3, MIN_REPLICAS]
    assert cluster.condition(name, "MetricsDegraded")["status"] == "False"
    print(f"\nreplicas seen (s, n) with pod 2 silent, then answering: {kubelet.seen}")


def test_in_hpa_mode_the_operator_leaves_the_size_to_the_hpa(cluster, servers):
    # Two idle fleets of two pods on the same servers: natively, both would go to minReplicas.
    native, by_hpa = fleet_doc("native", servers.port, 2, 0), fleet_doc("by-hpa", servers.port, 2, 0)
    by_hpa["spec"]["autoscaling"]["mode"] = "hpa"
    with Kubelet(cluster.api, "native", servers.port), Kubelet(cluster.api, "by-hpa", servers.port):
        cluster.apply(by_hpa)
        cluster.apply(native)
        hpa = wait_for(lambda: cluster.get("autoscaling/v2", "HorizontalPodAutoscaler", "by-hpa"),
                       "the HPA", timeout_s=15)
        assert hpa["spec"]["scaleTargetRef"]["kind"] == "ScoringFleet"
        # The native fleet's timer ran and scaled it down: by then the other one's would have too.
        wait_for(lambda: replicas(cluster, "native") == (MIN_REPLICAS, MIN_REPLICAS),
                 "the native fleet at minReplicas", timeout_s=15)
    assert replicas(cluster, "by-hpa") == (2, 2)
    status = cluster.fleet("by-hpa")["status"]
    assert status["desiredReplicas"] == 2  # the reconciler's: spec.replicas, which the HPA owns
    assert not {"lastDecision", "running", "waiting", "lastScaleTime"} & set(status)
    assert cluster.events("by-hpa", "TooFewReplicas") == [] and \
        cluster.events("native", "TooFewReplicas")
