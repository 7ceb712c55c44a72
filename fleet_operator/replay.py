"""Replay a load trace through the autoscaler's decide(), print each change of decision, plot it.

    python -m fleet_operator.replay TRACE.json --out plot.png

Owns the trace format and a deliberately simple Deployment simulation; the decision itself is
autoscaling.decide(), the same function the operator calls. No cluster, no network, no clock.

Trace (JSON):
    {
      "autoscaling": {...},        # spec.autoscaling of a ScoringFleet, camelCase as in the CRD
      "simulation": {"initialReplicas": 1, "startupDelaySeconds": 15},   # both optional
      "ticks": [                   # one per scrape, times in seconds from the start, increasing
        {"time": 0,  "load": 20},                    # simulated: total load, split evenly
        {"time": 5,  "load": 20, "missing": ["pod-1"]},  # these pods' scrapes fail this tick
        {"time": 10, "pods": [{"name": "a", "phase": "Running", "ready": true, "load": 7},
                              {"name": "b", "phase": "Running", "ready": true, "load": null,
                               "error": "timeout"}]}  # recorded: pods exactly as given
      ]
    }
Simulation: the Deployment follows desired replicas at once. A new pod (pod-0, pod-1, ... in
creation order) is Pending for startupDelaySeconds, then Running and ready; the initial pods are
Running from the start. Scale-down removes Pending pods first, then the newest, instantly. Each
Running pod reports total load / number of Running pods, scraped at the tick's time.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Mapping

from fleet_operator.autoscaling.decide import decide
from fleet_operator.autoscaling.history import History
from fleet_operator.autoscaling.values import Decision, PodSample
from fleet_operator.spec.autoscaling import AutoscalingSpec, SpecError, parse_autoscaling

EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)  # trace time 0


# ---- the trace's spec: spec.autoscaling, camelCase as in the CRD ----

def spec_from_trace(data: Mapping | None) -> AutoscalingSpec:
    """The trace's spec.autoscaling, read exactly as the operator reads a fleet's (SpecError if
    invalid); enabled regardless, since replaying means autoscaling."""
    return dataclasses.replace(parse_autoscaling(data, "autoscaling"), enabled=True)


# ---- the simulated Deployment ----

@dataclass(frozen=True)
class SimPod:
    name: str
    created_s: float  # -inf for the initial pods


@dataclass
class Fleet:
    """The simulated Deployment's pods. Mutable on purpose: it is the simulation's one piece of state."""

    startup_delay_s: float
    pods: list[SimPod] = field(default_factory=list)
    num_created: int = 0

    def scale_to(self, replicas: int, now_s: float) -> None:
        while len(self.pods) < replicas:
            self.pods.append(SimPod(f"pod-{self.num_created}", now_s))
            self.num_created += 1
        while len(self.pods) > replicas:
            victim = next((p for p in reversed(self.pods) if not self.is_running(p, now_s)), self.pods[-1])
            self.pods.remove(victim)

    def is_running(self, pod: SimPod, now_s: float) -> bool:
        return now_s - pod.created_s >= self.startup_delay_s

    def samples(self, load: float, missing: set[str], now_s: float) -> list[PodSample]:
        running = [p for p in self.pods if self.is_running(p, now_s)]
        share = load / len(running) if running else 0.0
        at = EPOCH + timedelta(seconds=now_s)
        return [self._sample(p, p in running, share, p.name in missing, at) for p in self.pods]

    @staticmethod
    def _sample(pod: SimPod, running: bool, share: float, is_missing: bool, at: datetime) -> PodSample:
        if not running:
            return PodSample(pod.name, "Pending", False, error="Pending")
        if is_missing:
            return PodSample(pod.name, "Running", True, error="scrape failed (trace)")
        return PodSample(pod.name, "Running", True, load=share, scraped_at=at)


def recorded_samples(pods: list[Mapping], now_s: float) -> list[PodSample]:
    at = EPOCH + timedelta(seconds=now_s)
    return [PodSample(p["name"], p.get("phase", "Running"), bool(p.get("ready", True)), bool(p.get("deleting")),
                      p.get("load"), at if p.get("load") is not None else None, p.get("error", ""))
            for p in pods]


# ---- the replay ----

@dataclass(frozen=True)
class Step:
    time_s: float
    offered_load: float | None  # the trace's total load (None for recorded ticks)
    samples: tuple[PodSample, ...]
    decision: Decision

    @property
    def num_ready(self) -> int:
        return sum(1 for s in self.samples if s.phase == "Running" and s.ready and not s.deleting)


def replay(trace: Mapping) -> list[Step]:
    """Every tick through decide(), the fleet following each decision."""
    spec = spec_from_trace(trace.get("autoscaling"))
    sim = trace.get("simulation", {})
    replicas = int(sim.get("initialReplicas", spec.min_replicas))
    fleet = Fleet(float(sim.get("startupDelaySeconds", 15)))
    fleet.scale_to(replicas, float("-inf"))
    history, steps = History(), []
    for tick in trace["ticks"]:
        now_s = float(tick["time"])
        offered = None if "pods" in tick else float(tick["load"])
        if offered is None:
            samples = recorded_samples(tick["pods"], now_s)
        else:
            samples = fleet.samples(offered, set(tick.get("missing", [])), now_s)
        decision = decide(samples, replicas, spec, history, EPOCH + timedelta(seconds=now_s))
        steps.append(Step(now_s, offered, tuple(samples), decision))
        replicas, history = decision.desired_replicas, decision.history
        fleet.scale_to(replicas, now_s)
    return steps


def changes(steps: list[Step]) -> list[str]:
    """One line per change of desired replicas, reason or MetricsDegraded."""
    lines, last = [], None
    for step in steps:
        d = step.decision
        key = (d.desired_replicas, d.reason, d.degraded)
        if key != last:
            degraded = " [MetricsDegraded]" if d.degraded else ""
            lines.append(f"t={step.time_s:6.0f}s  {d.reason}{degraded}  {d.message}")
            last = key
    return lines


def plot(steps: list[Step], out: Path, spec: AutoscalingSpec) -> None:
    """Load (total and per pod) above, desired and ready replicas below; degraded spans shaded."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = [s.time_s for s in steps]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 6))
    if any(s.offered_load is not None for s in steps):
        top.step(times, [s.offered_load for s in steps], where="post", color="grey", linewidth=3, alpha=0.4,
                 label="total load (trace)")
    top.step(times, [s.decision.total_load for s in steps], where="post", color="black", label="total load (reported)")
    for name in sorted({p.name for s in steps for p in s.samples}, key=lambda n: (len(n), n)):
        loads = [next((p.load for p in s.samples if p.name == name and p.load is not None), float("nan"))
                 for s in steps]
        top.step(times, loads, where="post", linewidth=0.8, label=name)
    top.axhline(spec.target_load_per_replica, color="grey", linestyle=":", label="target per pod")
    top.set_ylabel("sequences (running + waiting)")
    top.legend(fontsize="x-small", ncol=5, loc="upper right")
    bottom.step(times, [s.decision.desired_replicas for s in steps], where="post", label="desired replicas")
    bottom.step(times, [s.num_ready for s in steps], where="post", linestyle="--", label="ready replicas")
    for s in steps:
        if s.decision.degraded:
            bottom.axvspan(s.time_s, s.time_s + spec.scrape_interval_s, color="red", alpha=0.1, linewidth=0)
    bottom.set_ylabel("replicas (red: MetricsDegraded)")
    bottom.set_xlabel("time (s)")
    bottom.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fleet_operator.replay", description=__doc__.split("\n")[0])
    parser.add_argument("trace", type=Path, help="trace JSON (format in this module's docstring)")
    parser.add_argument("--out", type=Path, help="write the plot here (PNG)")
    args = parser.parse_args(argv)
    trace = json.loads(args.trace.read_text())
    try:
        steps = replay(trace)
    except SpecError as e:
        parser.error(f"{args.trace}: {e}")  # exits 2, as for any bad argument
    for line in changes(steps):
        print(line)
    if args.out:
        plot(steps, args.out, spec_from_trace(trace.get("autoscaling")))
        print(f"plot written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
