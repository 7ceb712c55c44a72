"""The chart's recording rules (charts/scoring-fleet/files/prometheus-rules.yaml) under promtool's
own rule-test engine (`promtool test rules`, Debian's `prometheus` package; `make test` installs it).

Each scenario is a table of pod timelines, one state per 15 s scrape. From it the test writes
promtool's unit-test file: the scraped series (`up`, both gauges, staleness markers where Prometheus
writes them) and, for every evaluation step, the exact samples the rules must give: the fleet's
true total while every pod is counted (answering, or starting: not answered since it appeared, so
it holds no load; or answering that its model is loading: 0), nothing otherwise. So no step may hold a
lower total.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

RULES = Path(__file__).resolve().parents[2] / "charts" / "scoring-fleet" / "files" / \
    "prometheus-rules.yaml"
INTERVAL_S = 15
GUARD_STEPS = 60 // INTERVAL_S  # the rules' `offset 1m`: some pod of the fleet known for a minute
NAMESPACE, FLEET = "team-a", "scorer"

# One pod's state at one scrape. `ok` answers both gauges; `loading` answers that its model is loading
# (scoringfleet_model_loading 1, both gauges 0: a new or restarted server); `down` is a failed scrape
# (frozen, dead, or not yet listening: up 0, its gauges stale); `no_queue` answers without
# sglang:num_queue_reqs; `unknown` is not a target (not yet discovered, or deleted: every series of
# it stale).
OK, LOADING, DOWN, NO_QUEUE, UNKNOWN = "ok", "loading", "down", "no_queue", "unknown"
KNOWN = (OK, LOADING, DOWN, NO_QUEUE)


@dataclass(frozen=True)
class Pod:
    name: str
    states: tuple[str, ...]   # one per step
    running: int = 0          # its gauges while it answers
    queued: int = 0
    fleet: str = FLEET
    job: str = "podmonitor"   # a second Pod with the same name and another job: a second monitor
    says_loading: bool = True  # exports scoringfleet_model_loading (SGLang's server does not)

    def load(self) -> int:
        return self.running + self.queued


def timeline(*spans: tuple[str, int]) -> tuple[str, ...]:
    return tuple(state for state, count in spans for _ in range(count))


def _tokens(states: tuple[str, ...], value_in: dict[str, object]) -> str:
    """promtool's values string: a value where the state has one, `stale` right after the last one
    (what Prometheus writes when a scrape fails or a target goes), `_` (no sample) otherwise."""
    out, had_value = [], False
    for state in states:
        value = value_in.get(state)
        if value is not None:
            out.append(str(value))
        else:
            out.append("stale" if had_value else "_")
        had_value = value is not None
    return " ".join(out)


def input_series(pods: list[Pod]) -> list[dict[str, str]]:
    series = []
    for pod in pods:
        labels = f'namespace="{NAMESPACE}",pod="{pod.name}",fleet="{pod.fleet}",job="{pod.job}"'
        series += [
            {"series": f"up{{{labels}}}",
             "values": _tokens(pod.states, {OK: 1, LOADING: 1, NO_QUEUE: 1, DOWN: 0})},
            {"series": f"sglang:num_running_reqs{{{labels}}}",
             "values": _tokens(pod.states, {OK: pod.running, LOADING: 0, NO_QUEUE: pod.running})},
            {"series": f"sglang:num_queue_reqs{{{labels}}}",
             "values": _tokens(pod.states, {OK: pod.queued, LOADING: 0})},
        ]
        if pod.says_loading:
            series.append({"series": f"scoringfleet_model_loading{{{labels}}}",
                           "values": _tokens(pod.states, {OK: 0, LOADING: 1, NO_QUEUE: 0})})
    return series


def _up(pods: list[Pod], name: str, step: int) -> int | None:
    """The pod's scoringfleet:pod_up:min at `step`: the lowest `up` of its targets, None if unknown."""
    values = [0 if p.states[step] == DOWN else 1 for p in pods
              if p.name == name and p.states[step] in KNOWN]
    return min(values) if values else None


def _fleet_known(pods: list[Pod], fleet: str, step: int) -> bool:
    return step >= 0 and any(p.fleet == fleet and p.states[step] in KNOWN for p in pods)


def _fleet_watched(pods: list[Pod], fleet: str, step: int) -> bool:
    """Some target of the fleet scraped twice in the 2 minutes up to a minute before `step`
    (`count_over_time(up[2m] offset 1m) >= 2`; promtool 2.42's ranges include both ends)."""
    end = step - GUARD_STEPS
    steps = range(max(0, end - 2 * GUARD_STEPS), end + 1)
    return any(sum(p.states[s] in KNOWN for s in steps) >= 2 for p in pods if p.fleet == fleet)


def is_starting(pods: list[Pod], name: str, step: int) -> bool:
    """A pod down at `step` that has not answered since it appeared: seen down with no answer in a
    minute, unknown a minute before, while Prometheus had scraped its fleet twice by then; it stays
    starting while it stays down."""
    (fleet,) = {p.fleet for p in pods if p.name == name}
    starting = False
    for s in range(step + 1):
        if _up(pods, name, s) != 0:
            starting = False  # unknown, or answering: it has answered since it appeared
            continue
        window = [_up(pods, name, w) for w in range(max(0, s - GUARD_STEPS), s + 1)]
        unseen_before = s < GUARD_STEPS or _up(pods, name, s - GUARD_STEPS) is None
        first_sight = 1 not in window and unseen_before and _fleet_watched(pods, fleet, s)
        starting = starting or first_sight
    return starting


def fleet_loads(pods: list[Pod], fleet: str, step: int) -> dict[str, int] | None:
    """What the rules must record at `step`, per pod (0 for a starting pod), or None (no sample):
    every known pod of the fleet answers both gauges or is starting, some pod answers, and some pod
    of it has been known for a minute."""
    names = sorted({p.name for p in pods if p.fleet == fleet and p.states[step] in KNOWN})
    if not names or step < GUARD_STEPS or not _fleet_known(pods, fleet, step - GUARD_STEPS):
        return None
    loads: dict[str, int] = {}
    for name in names:
        targets = [p for p in pods if p.name == name and p.states[step] in KNOWN]
        states = {p.states[step] for p in targets}
        if states == {OK}:
            loads[name] = targets[0].load()
        elif LOADING in states and DOWN not in states and NO_QUEUE not in states:
            loads[name] = 0  # it answers that it holds nothing
        elif is_starting(pods, name, step):
            loads[name] = 0
        else:
            return None
    if not any({p.states[step] for p in pods if p.name == name} == {OK} for name in names):
        return None  # no pod serves: zero serving pods is not zero load
    return loads


def fleet_total(pods: list[Pod], fleet: str, step: int) -> int | None:
    loads = fleet_loads(pods, fleet, step)
    return None if loads is None else sum(loads.values())


def expr_tests(pods: list[Pod], num_steps: int) -> list[dict]:
    tests = []
    for step in range(num_steps):
        eval_time = f"{step * INTERVAL_S}s"
        for fleet in sorted({p.fleet for p in pods}):
            total = fleet_total(pods, fleet, step)
            labels = f'namespace="{NAMESPACE}",fleet="{fleet}"'
            tests.append({
                "expr": f"scoringfleet:load:sum{{{labels}}}", "eval_time": eval_time,
                "exp_samples": [] if total is None else [
                    {"labels": f"scoringfleet:load:sum{{{labels}}}", "value": total}]})
            loads = fleet_loads(pods, fleet, step) or {}
            tests.append({
                "expr": f"scoringfleet:pod_load:sum{{{labels}}}", "eval_time": eval_time,
                "exp_samples": [
                    {"labels": f'scoringfleet:pod_load:sum{{{labels},pod="{name}"}}', "value": load}
                    for name, load in loads.items()]})
    return tests


def unit_test_file(pods: list[Pod]) -> dict:
    (num_steps,) = {len(p.states) for p in pods}
    return {"rule_files": [str(RULES)], "evaluation_interval": f"{INTERVAL_S}s",
            "tests": [{"interval": f"{INTERVAL_S}s", "input_series": input_series(pods),
                       "promql_expr_test": expr_tests(pods, num_steps)}]}


# Pod a carries 10, b 20, c 30: the fleet's true total is 60 whenever all three are there.
STEADY = timeline((OK, 24))
SCENARIOS: dict[str, tuple[list[Pod], dict[int, int | None]]] = {
    # name: (pods, hand-checked {step: total}) -- the table below is the whole expectation.
    "healthy": (
        [Pod("a", STEADY, 6, 4), Pod("b", STEADY, 20), Pod("c", STEADY, 10, 20)],
        {0: None, 3: None, 4: 60, 23: 60}),   # None in a fresh Prometheus' first minute
    "one-pod-frozen": (
        [Pod("a", STEADY, 10), Pod("b", timeline((OK, 8), (DOWN, 8), (OK, 8)), 20),
         Pod("c", STEADY, 30)],
        {7: 60, 8: None, 15: None, 16: 60}),  # 40 if the frozen pod were read as zero
    "one-pod-without-a-gauge": (
        [Pod("a", STEADY, 10), Pod("b", timeline((OK, 8), (NO_QUEUE, 8), (OK, 8)), 15, 5),
         Pod("c", STEADY, 30)],
        {7: 60, 8: None, 15: None, 16: 60}),  # 55 if the missing gauge counted as zero
    "all-pods-gone": (
        [Pod(n, timeline((OK, 8), (DOWN, 4), (UNKNOWN, 12)), load)
         for n, load in (("a", 10), ("b", 20), ("c", 30))],
        {7: 60, 8: None, 12: None, 23: None}),  # 0 if no data were zero load
    "a-pod-added": (
        [Pod("a", STEADY, 10), Pod("b", STEADY, 20),
         Pod("c", timeline((UNKNOWN, 8), (DOWN, 2), (OK, 14)), 30)],
        {7: 30, 8: 30, 9: 30, 10: 60}),  # c counts 0 while it loads its model (absent: no 2nd step)
    # The 2 + 1 of a burst: a third pod appears and stays down for a long model load (3 min here).
    "a-pod-starting-beside-two-loaded": (
        [Pod("a", timeline((OK, 40)), 10), Pod("b", timeline((OK, 40)), 20),
         Pod("c", timeline((UNKNOWN, 8), (DOWN, 12), (OK, 20)), 30)],
        {7: 30, 8: 30, 19: 30, 20: 60, 39: 60}),
    "a-pod-answered-then-stopped": (
        [Pod("a", STEADY, 10), Pod("b", STEADY, 20),
         Pod("c", timeline((UNKNOWN, 4), (DOWN, 2), (OK, 4), (DOWN, 6), (OK, 8)), 30)],
        {5: 30, 6: 60, 9: 60, 10: None, 15: None, 16: 60}),  # 30 if a stopped pod were starting
    # Answered once, then down for 25 min: far beyond any window, still never read as starting.
    "a-pod-answered-long-ago-then-stopped": (
        [Pod("a", timeline((OK, 120)), 10), Pod("b", timeline((OK, 120)), 20),
         Pod("c", timeline((UNKNOWN, 4), (OK, 2), (DOWN, 100), (OK, 14)), 30)],
        {5: 60, 6: None, 105: None, 106: 60}),
    # Answered in its first minute and stopped in it: `max_over_time(up[1m])` sees the answer.
    "a-pod-answered-briefly-then-stopped": (
        [Pod("a", STEADY, 10), Pod("b", STEADY, 20),
         Pod("c", timeline((UNKNOWN, 6), (DOWN, 1), (OK, 1), (DOWN, 8), (OK, 8)), 30)],
        {6: 30, 7: 60, 8: None, 15: None, 16: 60}),
    # A pod that never loads (CrashLoopBackOff) holds no load: the fleet keeps scaling on the rest.
    "a-pod-that-never-loads": (
        [Pod("a", STEADY, 10), Pod("b", STEADY, 20),
         Pod("c", timeline((UNKNOWN, 6), (DOWN, 18)), 30)],
        {6: 30, 23: 30}),
    # A fresh Prometheus cannot tell a starting pod from a frozen one: c holds the fleet back.
    "prometheus-cold-start-with-a-down-pod": (
        [Pod("a", STEADY, 10), Pod("b", STEADY, 20),
         Pod("c", timeline((DOWN, 10), (OK, 14)), 30)],
        {4: None, 9: None, 10: 60}),
    # Added 30 s into a fresh Prometheus (its interval 15 s): not starting until Prometheus has
    # scraped the fleet twice a minute before (step 5), and absent before that.
    "a-pod-added-in-the-first-minute": (
        [Pod("a", STEADY, 10), Pod("b", STEADY, 20),
         Pod("c", timeline((UNKNOWN, 2), (DOWN, 8), (OK, 14)), 30)],
        {4: None, 5: 30, 9: 30, 10: 60}),
    # Every pod replaced at once (the old ones gone, the new ones loading): nothing answers.
    "every-pod-starting": (
        [Pod("a", timeline((OK, 8), (UNKNOWN, 16)), 10),
         Pod("b", timeline((UNKNOWN, 8), (DOWN, 8), (OK, 8)), 20)],
        {7: 10, 8: None, 15: None, 16: 20}),  # 0 if starting pods alone made a fleet's load
    # A second monitor of the starting pod: both of its targets down, it still starts (counts 0).
    "a-starting-pod-on-two-monitors": (
        [Pod("a", STEADY, 10), Pod("b", STEADY, 20),
         Pod("c", timeline((UNKNOWN, 8), (DOWN, 4), (OK, 12)), 30),
         Pod("c", timeline((UNKNOWN, 8), (DOWN, 4), (OK, 12)), 30, job="servicemonitor")],
        {8: 30, 11: 30, 12: 60}),
    # SIGKILLed and restarted (the same pod, the same target): absent only until its new process
    # answers, which it does from its first second; then 0 while it loads its model.
    "a-pod-restarted": (
        [Pod("a", STEADY, 10), Pod("b", STEADY, 20),
         Pod("c", timeline((OK, 8), (DOWN, 1), (LOADING, 6), (OK, 9)), 30)],
        {7: 60, 8: None, 9: 30, 14: 30, 15: 60}),  # None for the whole load if loading were down
    # A new pod that answers at its first scrape, loading: never starting, 0 until loaded.
    "a-pod-added-loading": (
        [Pod("a", STEADY, 10), Pod("b", STEADY, 20),
         Pod("c", timeline((UNKNOWN, 8), (LOADING, 6), (OK, 10)), 30)],
        {7: 30, 8: 30, 13: 30, 14: 60}),
    # Every pod restarted at once: all loading, none serving; zero is not known to be the load.
    "every-pod-loading": (
        [Pod("a", timeline((OK, 8), (LOADING, 8), (OK, 8)), 10),
         Pod("b", timeline((OK, 8), (LOADING, 8), (OK, 8)), 20)],
        {7: 30, 8: None, 15: None, 16: 30}),
    # SGLang's servers (no loading gauge) beside ours: counted as they answer.
    "servers-without-the-loading-gauge": (
        [Pod("a", STEADY, 10, says_loading=False), Pod("b", STEADY, 20),
         Pod("c", timeline((OK, 8), (DOWN, 2), (OK, 14)), 30, says_loading=False)],
        {4: 60, 8: None, 9: None, 10: 60}),
    "a-pod-removed": (
        [Pod("a", STEADY, 10), Pod("b", STEADY, 20),
         Pod("c", timeline((OK, 8), (UNKNOWN, 16)), 30)],
        {7: 60, 8: 30}),  # a deleted pod leaves discovery: its load left with it
    "prometheus-cold-start": (
        [Pod("a", STEADY, 10), Pod("b", timeline((UNKNOWN, 2), (OK, 22)), 20),
         Pod("c", STEADY, 30)],
        {0: None, 1: None, 3: None, 4: 60}),  # 40 at steps 0-1 without the guard: b not yet known
    "two-monitors-one-pod": (
        [Pod("a", STEADY, 10), Pod("a", STEADY, 10, job="servicemonitor"), Pod("b", STEADY, 20),
         Pod("c", timeline((OK, 8), (DOWN, 4), (OK, 12)), 30, job="servicemonitor"),
         Pod("c", STEADY, 30)],
        {7: 60, 8: None, 12: 60}),  # counted once; one failing monitor is a failed scrape
    "other-fleet-unaffected": (
        [Pod("a", STEADY, 10), Pod("b", timeline((OK, 8), (DOWN, 16)), 20),
         Pod("x", STEADY, 7, fleet="other")],
        {7: 30, 8: None}),  # `other` stays at 7 throughout (checked by the generated file)
}


@pytest.fixture(scope="session")
def promtool() -> str:
    # Not a skip: a rule file nobody ran through promtool is the unchecked guarantee this is about.
    path = shutil.which(os.environ.get("PROMTOOL", "promtool"))
    if not path:
        pytest.fail("promtool not found: `make setup` installs Debian's prometheus package (as "
                    "root), or set PROMTOOL to a promtool binary", pytrace=False)
    return path


def _run(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60,
                          check=False)


def test_rule_file_passes_promtool_check(promtool):
    out = _run(promtool, "check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_rules_never_record_less_than_the_true_total(promtool, tmp_path, name):
    pods, hand_checked = SCENARIOS[name]
    assert {s: fleet_total(pods, FLEET, s) for s in hand_checked} == hand_checked
    test_file = tmp_path / f"{name}.yaml"
    test_file.write_text(yaml.safe_dump(unit_test_file(pods), sort_keys=False))
    out = _run(promtool, "test", "rules", str(test_file))
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]


def test_a_wrong_expectation_fails_promtool(promtool, tmp_path):
    """The check above can fail: promtool rejects the total a naive sum would give."""
    pods, _ = SCENARIOS["one-pod-frozen"]
    unit = unit_test_file(pods)
    labels = f'namespace="{NAMESPACE}",fleet="{FLEET}"'
    unit["tests"][0]["promql_expr_test"] = [{
        "expr": f"scoringfleet:load:sum{{{labels}}}", "eval_time": f"{10 * INTERVAL_S}s",
        "exp_samples": [{"labels": f"scoringfleet:load:sum{{{labels}}}", "value": 40}]}]
    test_file = tmp_path / "wrong.yaml"
    test_file.write_text(yaml.safe_dump(unit, sort_keys=False))
    out = _run(promtool, "test", "rules", str(test_file))
    assert out.returncode != 0
    assert "FAILED" in out.stdout + out.stderr
