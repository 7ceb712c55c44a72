"""A rollout that loses nothing, end to end: the real operator, the API emulator's Deployment
controller rolling pods (kube_api.run_pods: pods created for the template, maxSurge / maxUnavailable,
readiness), a real paced scoring server per pod started from the pod's own container args, and
`python -m gateway --fleet` in front. Under steady open-loop traffic the fleet's model changes
(model.source and model.name): every request gets 200, the old pods drain and exit 0, and the new
pods answer with the new model (each response's `model`). Run with -s for the figures.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import pytest

from bench.server_process import stop
from fleet_operator.names import FLEET_LABEL
from gateway.metrics import PREFIX as G
from kube_emulator.rollout import HASH_LABEL, template_hash
from tests.fleet_operator.crd_schema import ROOT
from tests.fleet_operator.loopback import free_port, pod_ip
from tests.gateway.support import gateway_process, sample
from tests.kit.waiting import wait_for
from tests.reliability.fleet import BATCH_S, NS
from tests.reliability.support import fleet_doc

pytestmark = pytest.mark.slow

RATE_PER_S = 20  # open loop through the gateway, all along
MAX_PODS = 6  # 3 old + 3 new, each on its own loopback address
ROLLOUT_S = 90.0  # the model change -> three new pods ready and three old ones gone
OLD_MODEL = {"source": "example/scorer-v1", "name": "scorer-v1"}
NEW_MODEL = {"source": "example/scorer-v2", "name": "scorer-v2"}
BODY = json.dumps({"query": [1, 2, 3], "items": [[4, 5, 6], [7, 8]], "label_token_ids": [7, 8]}).encode()


@dataclass
class PodServers:
    """run_pods' starter: each new pod of the fleet becomes a paced server (bench.paced_server)
    on its own loopback address, run with the pod's container args, bound to the pod, and marked
    ready once it answers /health_generate (its readiness probe)."""

    kube_api: object
    fleet: str
    port: int
    folder: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    _addresses: itertools.count = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, pod: dict) -> None:
        if (pod["metadata"].get("labels") or {}).get(FLEET_LABEL) != self.fleet:
            return
        name = pod["metadata"]["name"]
        with self._lock:
            host = pod_ip(next(self._addresses))
        [container] = pod["spec"]["containers"]
        with open(self.folder / f"{name}.log", "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bench.paced_server", "--batch-s", str(BATCH_S),
                 *container["args"], "--host", host],  # the last --host wins: the pod's address
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        self.kube_api.start_pod(NS, name, host, process=proc, ready=False)
        wait_for(lambda: _ready(f"http://{host}:{self.port}") or proc.poll() is not None,
                   timeout_s=60, interval_s=0.05)
        self.kube_api.set_pod_ready(NS, name, proc.poll() is None)

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def stop_all(self) -> None:
        for proc in self.procs.values():
            stop(proc)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health_generate", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class Answers:
    """Each request's (seconds since the start, status or client error, the response's model)."""

    items: list[tuple[float, str, str | None]] = field(default_factory=list)
    stopped: threading.Event = field(default_factory=threading.Event)

    def by_status(self) -> Counter:
        return Counter(status for _, status, _ in self.items)

    def models(self, since_s: float = 0.0) -> Counter:
        return Counter(model for at, _, model in self.items if at >= since_s)


async def _open_loop(url: str, answers: Answers, started: float) -> None:
    async def one(session: aiohttp.ClientSession) -> None:
        sent = time.monotonic() - started
        try:
            async with session.post(f"{url}/v1/score", data=BODY,
                                    headers={"Content-Type": "application/json"}) as response:
                body = await response.read()
                model = json.loads(body).get("model") if response.status == 200 else None
                answers.items.append((sent, str(response.status), model))
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as error:
            answers.items.append((sent, type(error).__name__, None))

    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        tasks, sent = [], 0
        while not answers.stopped.is_set() and time.monotonic() - started < 2 * ROLLOUT_S:
            tasks.append(asyncio.create_task(one(session)))
            sent += 1
            await asyncio.sleep(max(0.0, started + sent / RATE_PER_S - time.monotonic()))
        await asyncio.gather(*tasks)


def _pods(kube_api, fleet: str) -> list[dict]:
    return kube_api.request(
        "GET", f"/api/v1/namespaces/{NS}/pods?labelSelector={FLEET_LABEL}%3D{fleet}")[1]["items"]


def _ready_pods(kube_api, fleet: str, template: str) -> int:
    def ready(pod: dict) -> bool:
        conditions = (pod.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return sum(1 for p in _pods(kube_api, fleet) if p["metadata"]["labels"].get(HASH_LABEL) == template
               and not p["metadata"].get("deletionTimestamp") and ready(p))


def _template(cluster, fleet: str) -> str:
    return template_hash(cluster.deployment(fleet))


def test_a_model_rollout_under_load_loses_no_request_and_the_new_pods_serve_the_new_model(
        operator, kube_api, tmp_path):
    cluster, name, began = operator.cluster, "roll", time.monotonic()
    port = free_port([pod_ip(i) for i in range(MAX_PODS)])
    servers = PodServers(kube_api, name, port, tmp_path)
    kube_api.run_pods(servers.start)
    doc = fleet_doc(name, replicas=3)
    doc["spec"].update(model=OLD_MODEL, resources={"gpus": 0, "cpu": "1", "memory": "1Gi"},
                       server={"port": port})
    try:
        cluster.apply(doc)
        wait_for(lambda: cluster.deployment(name) is not None, "the fleet's Deployment")
        old = _template(cluster, name)
        wait_for(lambda: _ready_pods(kube_api, name, old) == 3, "three pods of the old model ready",
                 timeout_s=60)
        print(f"\nthe fleet's first 3 pods ready {time.monotonic() - began:.1f} s after the operator started")
        with gateway_process("--fleet", name, "--namespace", NS, log_path=tmp_path / "gateway.log",
                             env=kube_api.env) as gateway:
            wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 3, timeout_s=15)
            answers, started = Answers(), time.monotonic()
            traffic = threading.Thread(target=lambda: asyncio.run(_open_loop(gateway, answers, started)),
                                       daemon=True)
            traffic.start()
            wait_for(lambda: len(answers.items) >= 2 * RATE_PER_S, timeout_s=15)
            old_pods = {p["metadata"]["name"] for p in _pods(kube_api, name)}
            changed_s = time.monotonic() - started
            doc["spec"]["model"] = NEW_MODEL
            cluster.apply(doc)
            wait_for(lambda: _template(cluster, name) != old, "the Deployment's new template")
            new = _template(cluster, name)
            wait_for(lambda: _ready_pods(kube_api, name, new) == 3
                     and not old_pods & {p["metadata"]["name"] for p in _pods(kube_api, name)},
                     "three new pods ready and the old ones gone", timeout_s=ROLLOUT_S)
            done_s = time.monotonic() - started
            wait_for(lambda: time.monotonic() - started >= done_s + 2, timeout_s=5)  # 2 s on the new pods
            answers.stopped.set()
            traffic.join(timeout=60)
            retries = {reason: sample(gateway, f"{G}_retries_total", reason=reason)
                       for reason in ("503", "draining", "refused", "connect-timeout", "reset")}
    finally:
        servers.stop_all()

    print(f"\nrollout of a 3-pod fleet, {OLD_MODEL['name']} -> {NEW_MODEL['name']}, "
          f"open loop {RATE_PER_S}/s through the gateway:")
    print(f"  {len(answers.items)} requests over {max(at for at, _, _ in answers.items):.1f} s, by status "
          f"{dict(answers.by_status())}")
    print(f"  rollout: {done_s - changed_s:.1f} s from the model change to 3 new pods ready and "
          f"the 3 old gone; models answering: {dict(answers.models())}")
    print(f"  after the rollout: {dict(answers.models(done_s))}; gateway retries: {retries}")
    failed = [a for a in answers.items if a[1] != "200"]
    assert not failed, f"{len(failed)} of {len(answers.items)} not 200: {failed[:5]}"
    assert set(answers.models(done_s)) == {NEW_MODEL["name"]}  # only the new model, once rolled
    assert answers.models(done_s)[NEW_MODEL["name"]] >= RATE_PER_S
    assert set(answers.models()) == {OLD_MODEL["name"], NEW_MODEL["name"]}
    for pod in old_pods:  # drained what they had admitted, exited 0
        assert servers.procs[pod].returncode == 0, servers.log(pod)[-2000:]
        assert "drained in" in servers.log(pod), servers.log(pod)[-2000:]
    [container] = cluster.deployment(name)["spec"]["template"]["spec"]["containers"]
    assert container["args"][container["args"].index("--model-path") + 1] == NEW_MODEL["source"]
    strategy = cluster.deployment(name)["spec"]["strategy"]["rollingUpdate"]
    assert strategy == {"maxSurge": 1, "maxUnavailable": 0}
