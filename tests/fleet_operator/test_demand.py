"""demand.py: the gateway's waiting gauge parsed by Prometheus' own parser (a table),
and one tick against the emulator of a fleet at zero whose gateway pod (a small HTTP server on
loopback, labelled as the gateway's Deployment labels its pods) has requests waiting, or is silent."""
from __future__ import annotations

import asyncio

import pytest

from fleet_operator import kube
from fleet_operator.context import OperatorContext
from fleet_operator.demand import parse_waiting, scrape_gateway
from fleet_operator.names import serves_selector_labels
from fleet_operator.reconcile import reconcile_fleet
from fleet_operator.tick import autoscale_fleet
from tests.fleet_operator.crd_schema import CRD_PATH, ROOT, load_yaml, schema_errors
from tests.fleet_operator.loopback import free_port, pod_ip
from tests.fleet_operator.test_tick import NAME, T0
from tests.reliability.support import MetricsPod

G = "scoringfleet_gateway_waiting_requests"


@pytest.mark.parametrize("text,expected", [
    (f"# TYPE {G} gauge\n{G} 3.0\n", (3.0, "")),
    (f"{G} 0\n", (0.0, "")),
    ("sglang:num_running_reqs 0\n", (None, f"missing series {G}")),  # a scoring server, not a gateway
    (f"{G} -1\n", (None, f"invalid value for {G}")),
    (f"{G} NaN\n", (None, f"invalid value for {G}")),
], ids=["waiting", "zero", "absent", "negative", "nan"])
def test_parse_waiting(text, expected):
    assert parse_waiting(text) == expected


LABELLED = f'{G}{{fleet="a"}} 2\n{G}{{fleet="b"}} 5\n'


@pytest.mark.parametrize("text,fleet,expected", [
    (LABELLED, "b", (5.0, "")),
    (LABELLED, "a", (2.0, "")),
    (LABELLED, "c", (None, f'missing series {G}{{fleet="c"}}')),  # a gateway that does not route to c
    (f"{G} 4\n", "c", (4.0, "")),  # a gateway of one fleet from before the label
], ids=["its-own", "the-other", "not-routed", "unlabelled"])
def test_parse_waiting_counts_only_the_fleets_own_series(text, fleet, expected):
    assert parse_waiting(text, fleet) == expected


def gateway_pod(name: str, ip: str, port: int, ready: bool = True) -> dict:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"metadata": {"name": name}, "status": {"phase": "Running", "podIP": ip,
                                                   "conditions": conditions}}


def test_one_silent_gateway_pod_makes_the_demand_unknown_not_zero():
    port = free_port([pod_ip(5)])
    answering = MetricsPod(pod_ip(5), port, f"{G} 0\n".encode())
    answering.thread.start()
    try:
        pods = [gateway_pod("g0", pod_ip(5), port), gateway_pod("g1", pod_ip(6), port)]
        demand = asyncio.run(scrape_gateway(pods, "f", port, 0.5))
        assert demand.waiting is None and demand.error.startswith("g1: connection error")
        # the unready pod receives no requests: it is not asked
        pods[1] = gateway_pod("g1", pod_ip(6), port, ready=False)
        assert asyncio.run(scrape_gateway(pods, "f", port, 0.5)).waiting == 0
        assert asyncio.run(scrape_gateway([], "f", port, 0.5)).error == "no ready gateway pod routes to this fleet"
    finally:
        answering.stop()


ZERO = {"enabled": True, "mode": "native", "minReplicas": 0, "maxReplicas": 3,
        "targetLoadPerReplica": 10, "scrapeIntervalSeconds": 2}


@pytest.mark.parametrize("body,replicas,reason", [
    (f"{G} 2\n".encode(), 1, "ScaleFromZero"),
    (f"{G} 0\n".encode(), 0, "NoDemand"),
    (b"garbage{\n", 0, "ZeroGatewayUnknown"),
], ids=["requests-waiting", "nothing-waiting", "garbage-gauge"])
def test_a_tick_wakes_a_fleet_at_zero_from_its_gateway(kube_api, body, replicas, reason):
    api = kube_api.client()
    port = free_port([pod_ip(0)])
    doc = load_yaml(ROOT / "examples" / "minimal.yaml")
    doc["spec"].update(replicas=0, autoscaling=ZERO, server={"port": port},
                       gateway={"enabled": True, "port": port})
    assert schema_errors(doc) == []
    kube_api.apply_file(CRD_PATH)
    kube_api.create(doc)
    reconcile_fleet(OperatorContext(api, clock=lambda: T0), "default", NAME)
    gateway = MetricsPod(pod_ip(0), port, body)
    gateway.thread.start()
    try:
        kube_api.add_pod("default", f"{NAME}-gateway-0", serves_selector_labels(NAME), pod_ip(0), port)
        decision = autoscale_fleet(OperatorContext(api), "default", NAME).decision
    finally:
        gateway.stop()
    assert (decision.desired_replicas, decision.reason) == (replicas, reason)
    fleet = kube.get_fleet(api, "default", NAME)
    assert fleet["spec"]["replicas"] == replicas
    assert fleet["status"]["lastDecision"]["reason"] == reason
    assert "gateway" in fleet["status"]["lastDecision"]


def test_a_fleet_at_zero_wakes_for_requests_waiting_at_another_fleets_gateway(kube_api):
    """Fleet `classifier` has no gateway of its own: `front`'s lists it (spec.gateway.fleets) and
    listens on another port; only the requests waiting for `classifier` wake it."""
    api = kube_api.client()
    port = free_port([pod_ip(0)])
    kube_api.apply_file(CRD_PATH)
    for name, spec in (("front", {"replicas": 1, "gateway": {"enabled": True, "port": port,
                                                             "fleets": ["classifier"]}}),
                       ("classifier", {"replicas": 0, "autoscaling": ZERO})):
        doc = load_yaml(ROOT / "examples" / "minimal.yaml")
        doc["metadata"]["name"] = name
        doc["spec"].update(spec)
        assert schema_errors(doc) == []
        kube_api.create(doc)
        reconcile_fleet(OperatorContext(api, clock=lambda: T0), "default", name)
    [template] = [kube.get(api, "apps/v1", "Deployment", "default", "front-gateway")["spec"]["template"]]
    gateway = MetricsPod(pod_ip(0), port, f'{G}{{fleet="front"}} 0\n{G}{{fleet="classifier"}} 3\n'.encode())
    gateway.thread.start()
    try:
        kube_api.add_pod("default", "front-gateway-0", template["metadata"]["labels"], pod_ip(0), port)
        decision = autoscale_fleet(OperatorContext(api), "default", "classifier").decision
    finally:
        gateway.stop()
    assert (decision.desired_replicas, decision.reason) == (1, "ScaleFromZero")
    assert kube.get_fleet(api, "default", "classifier")["status"]["lastDecision"]["gateway"] == {"waiting": 3}
