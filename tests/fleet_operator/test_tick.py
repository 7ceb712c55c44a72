"""tick.py: the pure helpers in tables; one tick in-process against the emulator, with the pods'
/metrics served by small HTTP servers on loopback (pod i at 127.0.0.(i+2), the fleet's port)."""
from __future__ import annotations

import http.server
import logging
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import kopf
import pytest

from fleet_operator import handlers, kube
from fleet_operator.autoscaling.decide import decide
from fleet_operator.autoscaling.history import History
from fleet_operator.autoscaling.values import PodSample
from fleet_operator.context import OperatorConfig, OperatorContext
from fleet_operator.reconcile import reconcile_fleet
from fleet_operator.spec.autoscaling import AutoscalingSpec
from fleet_operator.tick import (
    DeploymentMissing,
    autoscale_fleet,
    event_for,
    is_due,
    native_fleet,
    scrape_timeout_s,
)
from tests.fleet_operator.crd_schema import CRD_PATH, ROOT, load_yaml, schema_errors
from tests.fleet_operator.loopback import free_port, pod_ip

T0 = datetime(2026, 11, 29, 18, 0, tzinfo=timezone.utc)
NAME = "qwen-scorer"
LABELS = {"scoring.fleet.dev/fleet": NAME}
NATIVE = {"enabled": True, "mode": "native", "minReplicas": 1, "maxReplicas": 5,
          "targetLoadPerReplica": 10, "scrapeIntervalSeconds": 2,
          "scaleDown": {"stabilizationWindowSeconds": 0}}


# ---- pure helpers ----

def decided_at(at: datetime) -> dict:
    return {"lastDecision": {"time": at.isoformat().replace("+00:00", "Z")}}


@pytest.mark.parametrize("autoscaling,status,now,due", [
    ({"scrapeIntervalSeconds": 5}, {}, T0, True),
    ({"scrapeIntervalSeconds": 5}, decided_at(T0), T0 + timedelta(seconds=1), False),
    ({"scrapeIntervalSeconds": 5}, decided_at(T0), T0 + timedelta(seconds=5), True),
    # a 1 s interval on a 1 s tick: a tick a little early still counts
    ({"scrapeIntervalSeconds": 1}, decided_at(T0), T0 + timedelta(seconds=0.6), True),
    ({"scrapeIntervalSeconds": 1}, decided_at(T0), T0 + timedelta(seconds=0.4), False),
    ({}, decided_at(T0), T0 + timedelta(seconds=4), False),  # default interval 5 s
    ({"scrapeIntervalSeconds": 5}, {"lastDecision": {"time": "yesterday"}}, T0, True),
], ids=["never-decided", "too-soon", "interval-passed", "half-tick-early", "too-early",
        "default-interval", "garbage-time"])
def test_is_due(autoscaling, status, now, due):
    fleet = native_fleet("qwen", "ns", {"model": {"source": "m"}, "image": "i",
                                        "autoscaling": {"enabled": True, **autoscaling}}, OperatorConfig())
    assert is_due(fleet, status, now) is due


PROM = "http://prometheus.monitoring.svc:9090"


@pytest.mark.parametrize("spec,native", [
    ({}, False),
    ({"autoscaling": {"enabled": False}}, False),
    ({"autoscaling": {"enabled": True}}, True),  # mode defaults to native
    ({"autoscaling": {"enabled": True, "mode": "native"}}, True),
    ({"autoscaling": {"enabled": True, "mode": "hpa"}}, False),
    ({"autoscaling": {"enabled": True, "mode": "keda", "keda": {"prometheusAddress": PROM}}}, False),
    ({"autoscaling": {"enabled": True, "mode": "keda"}}, False),  # no address: invalid, not native
    ({"autoscaling": {"enabled": "true"}}, False),  # not a boolean: the reconciler rejects it
    ({"autoscaling": []}, False),
    ({"autoscaling": {"enabled": True, "scrapeIntervalSeconds": 0}}, False),  # invalid: never due
    ({"autoscaling": {"enabled": True}, "image": None}, False),  # invalid elsewhere: not sized either
], ids=["no-autoscaling", "disabled", "default-mode", "native", "hpa", "keda", "keda-no-address",
        "string-true", "not-an-object", "invalid-interval", "invalid-fleet"])
def test_only_a_valid_natively_autoscaled_fleet_is_ticked(spec, native):
    # kopf's copy goes through the one parse, as the tick's fresh read does
    fleet = native_fleet("qwen", "ns", {"model": {"source": "m"}, "image": "i", **spec}, OperatorConfig())
    assert (fleet is not None) is native


@pytest.mark.parametrize("interval_s,timeout_s", [(1, 0.5), (2, 1.0), (5, 2.0), (60, 2.0)],
                         ids=["1s", "2s", "5s", "60s"])
def test_scrape_timeout_s_stays_within_the_interval(interval_s, timeout_s):
    assert scrape_timeout_s(interval_s) == timeout_s


SPEC = AutoscalingSpec(enabled=True, target_load_per_replica=10, max_replicas=5)


def one_decision(loads: list[float | None], current: int):
    pods = [PodSample(f"p{i}", "Running", True, load=load, scraped_at=T0 if load is not None else None,
                      error="" if load is not None else "connection refused")
            for i, load in enumerate(loads)]
    return decide(pods, current, SPEC, History(), T0)


def test_event_for_a_rescale_is_normal_and_carries_the_reason_and_message():
    decision = one_decision([30], 1)
    assert event_for(decision, None) == ("Normal", "ScaleUp", decision.message)
    assert "1 -> 3" in decision.message


def test_event_for_the_same_decision_again_is_none():
    decision = one_decision([10, 10], 2)
    assert event_for(decision, decision.to_status()) is None


def test_event_for_degraded_metrics_is_a_warning_naming_the_pod():
    decision = one_decision([1, 1, None], 3)  # the missing pod assumed at target still gives 2
    kind, reason, message = event_for(decision, None)
    assert (kind, reason) == ("Warning", "MetricsDegraded")
    assert "p2 (connection refused)" in message and "scale-down is blocked" in message


# ---- one tick against the emulator ----

class MetricsPods:
    """Pretend scoring servers: /metrics with settable gauges, one HTTP server per pod address."""

    def __init__(self, num_pods: int) -> None:
        self.hosts = [pod_ip(i) for i in range(num_pods)]
        self.port = free_port(self.hosts)
        self.gauges = {host: (0.0, 0.0) for host in self.hosts}
        self.on_scrape = lambda: None  # called in the middle of a scrape
        self._servers: dict[str, http.server.ThreadingHTTPServer] = {}
        for host in self.hosts:
            self._servers[host] = http.server.ThreadingHTTPServer((host, self.port), self._handler(host))
            threading.Thread(target=self._servers[host].serve_forever, args=(0.05,), daemon=True).start()

    def _handler(self, host: str):
        pods = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                pods.on_scrape()
                running, waiting = pods.gauges[host]
                body = (f"sglang:num_running_reqs {running}\n"
                        f"sglang:num_queue_reqs {waiting}\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        return Handler

    def stop(self, host: str) -> None:
        """This pod's metrics stop answering (connection refused)."""
        server = self._servers.pop(host)
        server.shutdown()
        server.server_close()

    def close(self) -> None:
        for host in list(self._servers):
            self.stop(host)


@pytest.fixture()
def metrics_pods() -> Iterator[MetricsPods]:
    pods = MetricsPods(3)
    yield pods
    pods.close()


def fleet_doc(port: int, replicas: int, autoscaling: dict) -> dict:
    doc = load_yaml(ROOT / "examples" / "minimal.yaml")
    doc["spec"].update(replicas=replicas, autoscaling=autoscaling, server={"port": port})
    assert schema_errors(doc) == []
    return doc


def make_fleet(kube_api, api, metrics_pods: MetricsPods, replicas: int, autoscaling: dict = NATIVE,
               num_pods: int | None = None) -> None:
    """The fleet, its children (the real reconcile path) and `num_pods` Running, ready Pods."""
    kube_api.apply_file(CRD_PATH)
    kube_api.create(fleet_doc(metrics_pods.port, replicas, autoscaling))
    reconcile_fleet(OperatorContext(api, clock=lambda: T0), "default", NAME)
    for i in range(replicas if num_pods is None else num_pods):
        kube_api.add_pod("default", f"{NAME}-{i}", LABELS, pod_ip(i), metrics_pods.port)


def tick(api):
    return autoscale_fleet(OperatorContext(api), "default", NAME)


def events(kube_api) -> list[dict]:
    _, answer = kube_api.request("GET", "/api/v1/namespaces/default/events?fieldSelector="
                                        f"involvedObject.name={NAME}")
    return [e for e in answer["items"] if e["reason"] != "Reconciled"]


def test_a_tick_scales_the_fleet_and_records_why(kube_api, metrics_pods):
    api = kube_api.client()
    make_fleet(kube_api, api, metrics_pods, replicas=1)
    metrics_pods.gauges[pod_ip(0)] = (2.0, 23.0)

    result = tick(api)

    assert result.decision.desired_replicas == 3  # ceil(25 / 10)
    fleet = kube.get_fleet(api, "default", NAME)
    assert fleet["spec"]["replicas"] == 3
    status = fleet["status"]
    assert (status["desiredReplicas"], status["running"], status["waiting"]) == (3, 2, 23)
    last = status["lastDecision"]
    assert (last["raw"], last["stabilized"], last["rateLimited"], last["clamped"], last["reason"]) == \
        (3, 3, 3, 3, "ScaleUp")
    assert last["pods"] == [{"name": f"{NAME}-0", "load": 25.0}]
    assert status["lastScaleTime"] and status["autoscalerHistory"]["scaleUpEvents"][0]["change"] == 2
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    # the reconciler's conditions are kept next to the autoscaler's
    assert conditions == {"SpecValid": "True", "Ready": "True", "MetricsAvailable": "True",
                          "MetricsDegraded": "False", "ScalingLimited": "False"}
    [event] = events(kube_api)
    assert (event["type"], event["reason"]) == ("Normal", "ScaleUp")
    assert event["message"].startswith("1 -> 3: load above target")


def test_the_same_decision_again_posts_no_second_event(kube_api, metrics_pods):
    api = kube_api.client()
    make_fleet(kube_api, api, metrics_pods, replicas=2)
    metrics_pods.gauges.update({pod_ip(0): (2.0, 8.0), pod_ip(1): (2.0, 8.0)})
    first, second = tick(api), tick(api)
    assert first.decision.reason == second.decision.reason == "WithinTolerance"
    assert (first.event is not None, second.event) == (True, None)
    assert len(events(kube_api)) == 1
    assert kube.get_fleet(api, "default", NAME)["spec"]["replicas"] == 2
    assert "lastScaleTime" not in kube.get_fleet(api, "default", NAME)["status"]


def test_a_silent_pod_blocks_the_scale_down_with_a_warning(kube_api, metrics_pods):
    api = kube_api.client()
    make_fleet(kube_api, api, metrics_pods, replicas=3)
    metrics_pods.stop(pod_ip(2))  # its Pod is Running and ready, its metrics refuse connections

    result = tick(api)  # two idle pods: without the guard, 3 -> 1

    assert (result.decision.raw, result.decision.desired_replicas) == (1, 3)
    status = kube.get_fleet(api, "default", NAME)["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == "MetricsDegraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "MissingSamples")
    assert f"{NAME}-2 (connection error" in degraded["message"]
    assert status["lastDecision"]["pods"][2]["load"] == "missing"
    [event] = events(kube_api)
    assert (event["type"], event["reason"]) == ("Warning", "MetricsDegraded")


def test_no_deployment_yet_is_a_retry_not_a_decision(kube_api, metrics_pods):
    api = kube_api.client()
    kube_api.apply_file(CRD_PATH)
    kube_api.create(fleet_doc(metrics_pods.port, 1, NATIVE))
    with pytest.raises(DeploymentMissing):
        tick(api)
    assert "status" not in kube.get_fleet(api, "default", NAME)


def test_the_timer_handler_turns_a_missing_deployment_into_a_short_retry(kube_api, metrics_pods):
    api = kube_api.client()
    kube_api.apply_file(CRD_PATH)
    body = kube_api.create(fleet_doc(metrics_pods.port, 1, NATIVE))
    memo = kopf.Memo(context=OperatorContext(api))
    with pytest.raises(kopf.TemporaryError) as raised:
        handlers.autoscale(name=NAME, namespace="default", uid=body["metadata"]["uid"],
                           spec=body["spec"], status={}, memo=memo, retry=0,
                           logger=logging.getLogger(__name__))
    assert raised.value.delay == 1.0  # kopf's default would be 60 s


@pytest.mark.parametrize("autoscaling", [
    {**NATIVE, "mode": "hpa"},
    {**NATIVE, "enabled": False},
], ids=["hpa-mode", "disabled"])
def test_the_operator_never_scales_a_fleet_it_does_not_autoscale(kube_api, metrics_pods, autoscaling):
    api = kube_api.client()
    make_fleet(kube_api, api, metrics_pods, replicas=1, autoscaling=autoscaling)
    metrics_pods.gauges[pod_ip(0)] = (2.0, 48.0)  # natively this would be 1 -> 5
    assert tick(api) is None
    fleet = kube.get_fleet(api, "default", NAME)
    assert fleet["spec"]["replicas"] == 1
    assert not {"lastDecision", "running", "lastScaleTime"} & set(fleet["status"])


def test_a_size_changed_during_the_tick_wins(kube_api, metrics_pods):
    api = kube_api.client()
    make_fleet(kube_api, api, metrics_pods, replicas=1)
    metrics_pods.gauges[pod_ip(0)] = (2.0, 48.0)
    # a user scales the fleet while the tick waits for the pods' answers
    metrics_pods.on_scrape = lambda: kube.scale_fleet(api, "default", NAME, 2)

    assert tick(api) is None
    fleet = kube.get_fleet(api, "default", NAME)
    assert fleet["spec"]["replicas"] == 2
    assert "lastDecision" not in fleet["status"]


def test_a_replaced_or_missing_fleet_is_left_alone(kube_api, metrics_pods):
    api = kube_api.client()
    make_fleet(kube_api, api, metrics_pods, replicas=1)
    assert autoscale_fleet(OperatorContext(api), "default", "nope") is None
    assert autoscale_fleet(OperatorContext(api), "default", NAME, uid="other") is None
    assert "lastDecision" not in kube.get_fleet(api, "default", NAME)["status"]


def test_decide_sees_pending_and_deleting_pods_without_scraping_them(kube_api, metrics_pods):
    api = kube_api.client()
    make_fleet(kube_api, api, metrics_pods, replicas=2, num_pods=1)
    kube_api.add_pod("default", f"{NAME}-1", LABELS, pod_ip(1), metrics_pods.port, phase="Pending",
                     ready=False)
    metrics_pods.gauges[pod_ip(0)] = (2.0, 48.0)
    metrics_pods.gauges[pod_ip(1)] = (99.0, 99.0)  # never read: the pod is Pending
    decision = tick(api).decision
    assert [p.to_status() for p in decision.pods] == [
        {"name": f"{NAME}-0", "load": 50.0},
        {"name": f"{NAME}-1", "load": "pending", "why": "Pending", "assumed": 0.0}]
    assert (decision.reason, decision.desired_replicas) == ("PendingPods", 2)  # no more while Pending

