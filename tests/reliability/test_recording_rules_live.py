"""The chart's recording rules in a real Prometheus (Debian's 2.42, 1 s scrapes and evaluations)
over real paced scoring servers (bench.paced_server: the real app, scheduler and /metrics; a batch
here takes 10 minutes, so the sequences a test sends stay in the gauges, a known load per pod).

One fleet, `scoringfleet:load:sum` and `scoringfleet:pod_load:sum` read every 0.25 s through each step:
  1. pods a (3 sequences) and b (5): absent in Prometheus' first minute (the cold-start guard), then 8;
  2. pod c becomes a target with nothing listening (up 0, as a pod loading its model), then starts
     listening late (its server process imports torch first): 8 throughout, c at 0, never absent;
  3. c takes 7 sequences: 15;
  3b. c is SIGKILLed and restarted (a container restart: the same pod, the same target), its new
     process loading its model for LOAD_S: absent while nothing answers there, present again (8, c
     at 0) within two scrape intervals of the new process's start, not after its load; c then
     takes its 7 sequences again: 15;
  4. b freezes (SIGSTOP): absent once a scrape of it times out, and stays absent;
  5. b leaves the targets (its file_sd file, as a deleted pod leaves Kubernetes SD) still frozen:
     back at 10 after the removal delay, which the test prints (docs/operator.md quotes it).
The truth is each server's own /metrics, read directly. Skips only where no prometheus binary is
installed, and fails instead under CI (CI=1), where `make setup` installs it.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from bench.server_process import stop
from fleet_operator.scraper import parse_gauges
from tests.fleet_operator.crd_schema import ROOT
from tests.fleet_operator.loopback import free_port, pod_ip
from tests.kit.waiting import wait_for
from tests.reliability.prometheus import BINARY_ENV, Prometheus, Target, find_binary

pytestmark = pytest.mark.slow

NS, FLEET = "default", "scorer"
BATCH_S = 600  # longer than the test: no batch ends, so every sequence sent stays counted
HELD = {"a": 3, "b": 5, "c": 7}  # sequences each pod holds once loaded
POLL_S = 0.25
LOAD_S = 4  # the restarted c's model load: longer than the two scrape intervals it must take


@pytest.fixture()
def prometheus_binary() -> str:
    path = find_binary()
    if path:
        return path
    why = (f"no prometheus binary (set {BINARY_ENV}, or `make setup`: Debian's prometheus package, "
           "which also ships promtool)")
    if os.environ.get("CI"):
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


# ---- the servers and their load ----

@contextlib.contextmanager
def paced_servers(hosts: list[str], port: int, folder: Path,
                  load_s: float = 0) -> Iterator[dict[str, int]]:
    """One paced server per host (tests/reliability/paced_fleet.py): {host: pid} as each forks;
    its model loads for load_s (listening meanwhile). Each is SIGKILLed on exit (a frozen one is
    resumed first), then the launcher is reaped."""
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.paced_fleet", "--port", str(port),
         "--batch-s", str(BATCH_S), "--load-s", str(load_s), "--log-dir", str(folder), *hosts],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    pids: dict[str, int] = {}

    def read() -> None:
        for line in launcher.stdout:  # `pid HOST PID` as each server forks, `exit PID CODE` later
            kind, key, value = line.split()
            if kind == "pid":
                pids[key] = int(value)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield pids
    finally:
        for pid in pids.values():
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        stop(launcher)
        reader.join(timeout=5)


def listening(host: str, port: int) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"http://{host}:{port}/health", timeout=1).status_code == 200
    return False


def ready(host: str, port: int) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"http://{host}:{port}/health_generate", timeout=1).status_code == 200
    return False


def process_start_s(host: str, port: int) -> float:
    """The server's process_start_time_seconds (epoch seconds), from its own /metrics."""
    text = httpx.get(f"http://{host}:{port}/metrics", timeout=5).text
    (line,) = [line for line in text.splitlines() if line.startswith("process_start_time_seconds ")]
    return float(line.split()[1])


def server_load(host: str, port: int) -> float:
    """The truth: running + queued sequences from the server's own /metrics."""
    gauges, why = parse_gauges(httpx.get(f"http://{host}:{port}/metrics", timeout=5).text)
    assert gauges is not None, why
    return gauges.load


def hold(host: str, port: int, sequences: int) -> socket.socket:
    """One score request of `sequences` items, its answer never read: the connection stays open,
    so the server neither finishes (its batch takes BATCH_S) nor aborts it."""
    items = ", ".join(["[4, 5, 6]"] * sequences)
    body = f'{{"query": [1, 2, 3], "items": [{items}], "label_token_ids": [7, 8]}}'.encode()
    conn = socket.create_connection((host, port), timeout=5)
    conn.sendall(b"POST /v1/score HTTP/1.1\r\nHost: " + host.encode() +
                 b"\r\nContent-Type: application/json\r\nContent-Length: " +
                 str(len(body)).encode() + b"\r\n\r\n" + body)
    return conn


# ---- what Prometheus records, step by step ----

@dataclass(frozen=True)
class Seen:
    at_s: float                  # the instant read, since the step began
    total: float | None          # scoringfleet:load:sum, None when absent
    pods: dict[str, float]       # scoringfleet:pod_load:sum per pod
    up: dict[str, float]         # up per pod


def observe(prom: Prometheus, since: float) -> Seen:
    """The three series at one instant, a second ago (so that instant's evaluation is written)."""
    sel, at = f'{{namespace="{NS}",fleet="{FLEET}"}}', time.time() - 1
    totals = prom.query(f"scoringfleet:load:sum{sel}", at)
    assert len(totals) <= 1, totals
    return Seen(at - since, totals[0][1] if totals else None,
                {m["pod"]: v for m, v in prom.query(f"scoringfleet:pod_load:sum{sel}", at)},
                {m["pod"]: v for m, v in prom.query(f"up{sel}", at)})


@dataclass
class Step:
    """One step's observations, polled until `done` holds for the latest (or timeout_s)."""

    name: str
    seen: list[Seen] = field(default_factory=list)
    began: float = field(default_factory=time.time)

    def watch(self, prom: Prometheus, done: Callable[[Seen], bool], timeout_s: float) -> Seen:
        """Reads until done(the latest read) or timeout_s after the step began."""
        while True:
            last = observe(prom, self.began)
            self.seen.append(last)
            if done(last):
                return last
            if last.at_s > timeout_s:
                raise AssertionError(f"{self.name}: not done after {timeout_s} s; last seen "
                                     f"{self.seen[-5:]}\n{prom.log()[-2000:]}")
            time.sleep(POLL_S)

    def totals(self) -> set[float | None]:
        return {s.total for s in self.seen}

    def __repr__(self) -> str:  # the timeline, one read a line, for a failing assertion
        return f"{self.name}:\n" + "\n".join(
            f"  {s.at_s:6.2f} s  total {s.total}  pods {s.pods}  up {s.up}" for s in self.seen)


def consistent(seen: Seen) -> bool:
    """The per-pod series are there exactly when the fleet's is, and add up to it."""
    if seen.total is None:
        return not seen.pods
    return sum(seen.pods.values()) == seen.total


def test_the_recording_rules_in_a_real_prometheus(prometheus_binary, tmp_path):
    hosts = {name: pod_ip(i) for i, name in enumerate(HELD)}
    port = free_port(list(hosts.values()))
    target = {name: Target(f"{host}:{port}", f"{FLEET}-{name}", NS, FLEET)
              for name, host in hosts.items()}
    steps: list[Step] = []
    with contextlib.ExitStack() as stack:
        prom = stack.enter_context(Prometheus(prometheus_binary, tmp_path, [target["a"], target["b"]]))
        started = time.time()
        pids = stack.enter_context(paced_servers([hosts["a"], hosts["b"]], port, tmp_path))
        wait_for(lambda: all(listening(hosts[n], port) for n in "ab"), "servers a and b", 90)
        for name in "ab":
            stack.enter_context(contextlib.closing(hold(hosts[name], port, HELD[name])))
        wait_for(lambda: [server_load(hosts[n], port) for n in "ab"] == [3, 5], "a and b loaded")

        steps.append(warm_up := Step("1 warm-up"))
        warm_up.watch(prom, lambda s: s.total == 8, timeout_s=120)
        warm_up_s = warm_up.seen[-1].at_s + warm_up.began - started

        prom.set_targets(list(target.values()))  # c: a target before anything listens there
        steps.append(starting := Step("2 c starting"))
        first_down = starting.watch(prom, lambda s: s.up.get(f"{FLEET}-c") == 0, timeout_s=20)
        starting.watch(prom, lambda s: s.at_s > first_down.at_s + 3, timeout_s=30)  # however fast c loads
        c_pids = stack.enter_context(paced_servers([hosts["c"]], port, tmp_path))  # listening late
        starting.watch(prom, lambda s: listening(hosts["c"], port), timeout_s=90)
        c_held = stack.enter_context(contextlib.closing(hold(hosts["c"], port, HELD["c"])))
        steps.append(loaded := Step("3 c loaded"))
        loaded.watch(prom, lambda s: s.total == 15, timeout_s=20)

        os.kill(c_pids[hosts["c"]], signal.SIGKILL)
        c_held.close()
        steps.append(killed := Step("3b c killed"))
        killed.watch(prom, lambda s: s.total is None, timeout_s=10)
        stack.enter_context(paced_servers([hosts["c"]], port, tmp_path, load_s=LOAD_S))
        steps.append(restarted := Step("3b c restarted"))
        back_after_restart = restarted.watch(prom, lambda s: s.total == 8, timeout_s=20)
        restarted_at = process_start_s(hosts["c"], port)
        assert not ready(hosts["c"], port)  # still loading: the fleet came back before its model
        wait_for(lambda: ready(hosts["c"], port), "c loaded after its restart", 30)
        stack.enter_context(contextlib.closing(hold(hosts["c"], port, HELD["c"])))
        restarted.watch(prom, lambda s: s.total == 15, timeout_s=20)

        os.kill(pids[hosts["b"]], signal.SIGSTOP)
        steps.append(frozen := Step("4 b frozen"))
        first_absent = frozen.watch(prom, lambda s: s.total is None, timeout_s=10)
        frozen.watch(prom, lambda s: s.at_s > first_absent.at_s + 5, timeout_s=20)

        prom.set_targets([target["a"], target["c"]])  # b leaves, still frozen
        steps.append(removed := Step("5 b removed"))
        back = removed.watch(prom, lambda s: s.total == 10, timeout_s=30)
        removed.watch(prom, lambda s: s.at_s > back.at_s + 3, timeout_s=30)
        assert [server_load(hosts[n], port) for n in "ac"] == [3, 7]  # the truth, at the end

    for step in steps:
        assert all(consistent(s) for s in step.seen), step
    c = f"{FLEET}-c"
    starting_seen = [s for s in starting.seen if s.up.get(c) == 0]
    assert warm_up.totals() <= {None, 8}, warm_up
    assert starting.totals() == {8}, starting  # never absent while c loads
    # c at 0 in the per-pod series (absent only in a read between c's first scrape and the next
    # evaluation: the rules run a little behind the scrapes)
    assert all(s.pods.get(c, 0) == 0 for s in starting_seen), starting
    assert sum(c in s.pods for s in starting_seen) >= 4, starting
    assert loaded.totals() <= {8, 15}, loaded
    assert killed.totals() <= {15, None}, killed
    assert restarted.totals() <= {None, 8, 15}, restarted
    # present again within two scrape intervals of the new process's start (one to its first
    # scrape, one to the next evaluation; 1.9 s measured here), plus 1 s for the new process to
    # listen and the reads' 0.25 s grid on a loaded machine; not after its model load (LOAD_S)
    back_s = restarted.began + back_after_restart.at_s - restarted_at
    assert back_s <= 2 * prom.interval_s + 1, restarted
    after = frozen.seen[frozen.seen.index(first_absent):]
    assert frozen.totals() <= {15, None} and all(s.total is None for s in after), frozen
    after = removed.seen[removed.seen.index(back):]
    assert removed.totals() <= {None, 10} and all(s.total == 10 for s in after), removed
    b_gone = next(s.at_s for s in removed.seen if f"{FLEET}-b" not in s.up)
    print(f"\nfirst load after Prometheus started: {warm_up_s:.1f} s; c loading (up 0) with the "
          f"fleet at 8: {len(starting_seen)} reads over {starting_seen[-1].at_s - starting_seen[0].at_s:.1f} s;"
          f" c restarted -> the fleet present again {back_s:.1f} s after its process started (its "
          f"model loads for {LOAD_S} s); frozen b -> absent: {first_absent.at_s:.1f} s; "
          f"b removed -> its up gone: {b_gone:.1f} s, "
          f"the fleet back at 10: {back.at_s:.1f} s")
