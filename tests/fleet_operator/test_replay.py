"""The replay tool on the shipped example trace and on small inline traces."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fleet_operator.replay import Fleet, main, replay, spec_from_trace
from fleet_operator.spec.autoscaling import DEFAULT_SCALE_DOWN, ScalingPolicy

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "traces" / "step-load.json"


def example_trace() -> dict:
    return json.loads(EXAMPLE.read_text())


def test_cli_writes_png_and_prints_each_change(tmp_path, capsys):
    out = tmp_path / "plot.png"
    assert main([str(EXAMPLE), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"plot written to {out}"
    assert any(line.startswith("t=    60s  ScaleUpLimit  1 -> 5:") for line in lines)
    assert any(" MetricsDegraded " in line and "7 -> 7" in line for line in lines)


def test_example_rises_to_load_over_target_after_the_step():
    steps = replay(example_trace())
    before = [s.decision.desired_replicas for s in steps if s.time_s < 60]
    plateau = [s for s in steps if 120 <= s.time_s < 300]
    assert set(before) == {1}
    # 200 sequences / 32 per pod; reached within three scrape intervals of the step (60 s)
    assert all(s.decision.desired_replicas == math.ceil(200 / 32) for s in plateau)
    assert next(s.time_s for s in steps if s.decision.desired_replicas == 7) <= 60 + 3 * 5
    assert all(s.num_ready == 7 for s in plateau)


def test_example_holds_while_degraded_and_falls_to_min_after_the_down_window():
    steps = replay(example_trace())
    degraded = [s for s in steps if s.decision.degraded]
    assert [s.time_s for s in degraded] == [float(t) for t in range(320, 400, 5)]
    assert all(s.decision.desired_replicas == s.decision.current_replicas == 7 for s in degraded)
    drop = next(s for s in steps if s.decision.desired_replicas < s.decision.current_replicas)
    # the load stops at 300 s; the 60 s down window ends at 360 s; pod-1 answers again at 400 s
    assert (drop.time_s, drop.decision.desired_replicas) == (400, 1)
    assert steps[-1].decision.desired_replicas == 1


def test_pending_guard_holds_new_pods_while_earlier_ones_start():
    trace = {"autoscaling": {"maxReplicas": 20,
                             "scaleUp": {"policies": [{"type": "Pods", "value": 2, "periodSeconds": 5}]}},
             "simulation": {"initialReplicas": 1, "startupDelaySeconds": 30},
             "ticks": [{"time": t, "load": 320} for t in range(0, 45, 5)]}
    steps = replay(trace)
    # without the guard: 3, 5, 7, 9, 10 while the first new pods are still Pending
    assert [s.decision.desired_replicas for s in steps] == [3, 3, 3, 3, 3, 3, 5, 5, 5]
    assert {s.decision.reason for s in steps[1:6] + steps[7:]} == {"PendingPods"}


def test_recorded_pods_used_as_given():
    trace = {"autoscaling": {"targetLoadPerReplica": 10},
             "simulation": {"initialReplicas": 2},
             "ticks": [{"time": 0, "pods": [{"name": "a", "load": 30}, {"name": "b", "load": 10}]},
                       {"time": 5, "pods": [{"name": "a", "load": 30}, {"name": "b", "load": None, "error": "timeout"},
                                            {"name": "c", "phase": "Pending", "ready": False}]}]}
    first, second = replay(trace)
    assert (first.decision.desired_replicas, first.decision.reason) == (4, "ScaleUp")
    assert second.decision.to_status()["pods"][1] == {"name": "b", "load": "missing", "why": "timeout", "assumed": 0.0}


def test_fleet_removes_pending_pods_first():
    fleet = Fleet(startup_delay_s=10)
    fleet.scale_to(2, float("-inf"))
    fleet.scale_to(4, 0.0)
    fleet.scale_to(3, 20.0)  # all running: the newest goes
    fleet.scale_to(5, 25.0)
    fleet.scale_to(3, 30.0)  # pod-4 and pod-5 still Pending: they go, not the newest Running pod-2
    assert [p.name for p in fleet.pods] == ["pod-0", "pod-1", "pod-2"]


def test_spec_from_trace_defaults_and_camel_case():
    one_pod_a_minute = [{"type": "Pods", "value": 1, "periodSeconds": 60}]
    spec = spec_from_trace({"minReplicas": 2, "scaleUp": {"selectPolicy": "Min", "policies": one_pod_a_minute}})
    assert (spec.min_replicas, spec.max_replicas, spec.target_load_per_replica) == (2, 8, 32.0)
    assert spec.scale_up.policies == (ScalingPolicy("Pods", 1, 60),) and spec.scale_up.select_policy == "Min"
    assert spec.scale_down == DEFAULT_SCALE_DOWN


def test_an_invalid_trace_spec_is_rejected_as_the_operator_rejects_a_fleet(tmp_path, capsys):
    trace = tmp_path / "bad.json"
    trace.write_text(json.dumps({"autoscaling": {"targetLoadPerReplica": 0}, "ticks": []}))
    with pytest.raises(SystemExit) as exited:
        main([str(trace)])
    assert exited.value.code == 2
    assert "autoscaling.targetLoadPerReplica must be > 0" in capsys.readouterr().err
