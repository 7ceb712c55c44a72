"""A fleet on loopback for the scale-in tests: scoring-server processes bound to Pods of the API
emulator (so a deleted pod drains as a kubelet would make it), the gateway in front, steady traffic
through it, and a watcher of the pods' deletion costs as they go.

Servers are bench.paced_server's (the real app, scheduler and SIGTERM drain over a model whose
batches take wall time, not CPU), forked from one launcher (paced_fleet.py): pod i is 127.0.0.(i+2)
on a shared port.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from bench.reliability import Answer, post
from bench.server_process import stop
from fleet_operator.autoscaling.scale_in import DELETION_COST
from fleet_operator.names import FLEET_LABEL
from tests.fleet_operator.crd_schema import ROOT
from tests.fleet_operator.loopback import free_port, pod_ip
from tests.kit.waiting import wait_for

NS = "default"
BATCH_S = 0.1  # every forward pass of a paced server takes this long: requests are in flight
GRACE_S = 20  # the pods' terminationGracePeriodSeconds: a drain here takes well under a second
REQUEST_TIMEOUT_S = 10.0  # a client gives up after this (an answer that never came is a failure)
MAX_TRAFFIC_S = 60.0  # no traffic stream outlives this, whatever the test does


class ForkedServer:
    """One server of the launcher (paced_fleet.py), as the emulator's kubelet wants a process:
    send_signal, poll (its exit code once the launcher reported it), kill."""

    def __init__(self, pid: int, exit_codes: dict[int, int]) -> None:
        self.pid, self._exit_codes = pid, exit_codes

    @property
    def returncode(self) -> int | None:
        return self._exit_codes.get(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


@dataclass
class Servers:
    names: list[str]
    procs: list[ForkedServer]
    port: int
    logs: list[Path]

    def url(self, index: int) -> str:
        return f"http://{pod_ip(index)}:{self.port}"

    def log(self, index: int) -> str:
        return self.logs[index].read_text(errors="replace")


def _healthy(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    return False


def _read_launcher(launcher: subprocess.Popen, pids: dict[str, int], exit_codes: dict[int, int]) -> None:
    for line in launcher.stdout:
        kind, key, value = line.split()
        if kind == "pid":
            pids[key] = int(value)
        elif kind == "exit":
            exit_codes[int(key)] = int(value)


@contextlib.contextmanager
def fleet_pods(kube_api: Any, fleet: str, num_pods: int, folder: Path) -> Iterator[Servers]:
    """num_pods paced servers, each bound to a Running, ready Pod <fleet>-i of the emulator."""
    hosts = [pod_ip(i) for i in range(num_pods)]
    port = free_port(hosts)
    pids: dict[str, int] = {}
    exit_codes: dict[int, int] = {}
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.paced_fleet", "--port", str(port),
         "--batch-s", str(BATCH_S), "--log-dir", str(folder), *hosts],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    reader = threading.Thread(target=_read_launcher, args=(launcher, pids, exit_codes), daemon=True)
    reader.start()
    try:
        urls = [f"http://{host}:{port}" for host in hosts]
        wait_for(lambda: all(_healthy(url) for url in urls), "the scoring servers", timeout_s=60)
        servers = Servers([f"{fleet}-{i}" for i in range(num_pods)],
                          [ForkedServer(pids[host], exit_codes) for host in hosts], port,
                          [folder / f"{host}.log" for host in hosts])
        for i, (name, proc) in enumerate(zip(servers.names, servers.procs)):
            kube_api.add_pod(NS, name, {FLEET_LABEL: fleet}, pod_ip(i), port, process=proc,
                             grace_s=GRACE_S)
        yield servers
    finally:
        stop(launcher)  # it passes SIGTERM on to the servers still running
        reader.join(timeout=5)


class PodWatcher:
    """Polls the fleet's pods every 50 ms: every pod's deletion cost at the moment each pod was
    first seen terminating, and the order in which pods disappeared."""

    def __init__(self, kube_api: Any, fleet: str) -> None:
        self.kube_api, self.fleet = kube_api, fleet
        # pod -> {every pod then present: its pod-deletion-cost annotation}, when it began terminating
        self.costs_when_deleted: dict[str, dict[str, str | None]] = {}
        self.costs: dict[str, str | None] = {}  # the last seen, per pod
        self.gone: list[str] = []
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-watcher", daemon=True)

    def __enter__(self) -> PodWatcher:
        self._poll()
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        deadline = time.monotonic() + MAX_TRAFFIC_S
        while not self._stop.wait(0.05) and time.monotonic() < deadline:
            self._poll()

    def _poll(self) -> None:
        status, answer = self.kube_api.request(
            "GET", f"/api/v1/namespaces/{NS}/pods?labelSelector={FLEET_LABEL}%3D{self.fleet}")
        if status != 200:
            return
        costs = {pod["metadata"]["name"]: (pod["metadata"].get("annotations") or {}).get(DELETION_COST)
                 for pod in answer["items"]}
        self.costs.update(costs)
        for pod in answer["items"]:
            name = pod["metadata"]["name"]
            if pod["metadata"].get("deletionTimestamp") and name not in self.costs_when_deleted:
                self.costs_when_deleted[name] = costs
        present = set(costs)
        self.gone += sorted(self._seen - present - set(self.gone))
        self._seen |= present


@dataclass
class Stream:
    """One source of traffic: open loop (rate_per_s) or closed loop (concurrency), until stopped."""

    name: str
    url: str
    num_items: int
    rate_per_s: float = 0.0
    concurrency: int = 0
    stopped: threading.Event = field(default_factory=threading.Event)
    answers: list[Answer] = field(default_factory=list)

    def body(self) -> bytes:
        items = ", ".join(["[4, 5, 6]"] * self.num_items)
        return f'{{"query": [1, 2, 3], "items": [{items}], "label_token_ids": [7, 8]}}'.encode()

    def by_status(self) -> Counter:
        return Counter(a.status if a.error is None else a.error for a in self.answers)


class Traffic:
    """Runs the streams on an event loop of its own (a thread) until each is stopped; every
    request's answer is kept in its stream (a client-side error as its exception's name)."""

    def __init__(self, *streams: Stream) -> None:
        self.streams = streams
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="traffic",
                                        daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        for stream in self.streams:
            stream.stopped.set()
        self._thread.join(timeout=MAX_TRAFFIC_S)

    async def _main(self) -> None:
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                         timeout=timeout) as session:
            await asyncio.gather(*(self._run(session, s) for s in self.streams))

    async def _run(self, session: aiohttp.ClientSession, stream: Stream) -> None:
        deadline, data = time.monotonic() + MAX_TRAFFIC_S, stream.body()

        async def one() -> None:
            stream.answers.append(await post(session, stream.url, data))

        def going() -> bool:
            return not stream.stopped.is_set() and time.monotonic() < deadline

        if stream.concurrency:
            async def client() -> None:
                while going():
                    await one()
            await asyncio.gather(*(client() for _ in range(stream.concurrency)))
            return
        start, sent, tasks = time.monotonic(), 0, []
        while going():  # each request its own task at its send time: an open loop
            tasks.append(asyncio.create_task(one()))
            sent += 1
            await asyncio.sleep(max(0.0, start + sent / stream.rate_per_s - time.monotonic()))
        await asyncio.gather(*tasks)

