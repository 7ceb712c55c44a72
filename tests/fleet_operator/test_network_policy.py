"""The fleet's NetworkPolicies as a CNI reads them: who may open a connection to a scoring pod or a
gateway pod. `admits()` is Kubernetes' NetworkPolicy semantics for ingress (a pod no policy selects
admits all; a selected pod admits what any rule of any selecting policy admits; a peer's
podSelector alone means the policy's namespace; both selectors together mean both), checked on its
own cases first, then run on the built policies with pods from around a cluster."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

import pytest

from fleet_operator.builders import build_children
from fleet_operator.context import OperatorConfig
from fleet_operator.spec.fleet import parse_fleet
from tests.fleet_operator.test_builders import IMAGE

NS_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)
    ip: str = "10.1.0.9"
    namespace_labels: dict[str, str] | None = None  # default: just the name label

    def ns_labels(self) -> dict[str, str]:
        return {NS_LABEL: self.namespace, **(self.namespace_labels or {})}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector: matchLabels and matchExpressions, all of them; {} selects everything."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if not {"In": key in labels and labels[key] in values,
                "NotIn": key not in labels or labels[key] not in values,
                "Exists": key in labels, "DoesNotExist": key not in labels}[op]:
            return False
    return True


def peer_matches(peer: dict[str, Any], policy_ns: str, source: Pod) -> bool:
    if "ipBlock" in peer:
        ip = ipaddress.ip_address(source.ip)
        block = peer["ipBlock"]
        return ip in ipaddress.ip_network(block["cidr"]) and \
            not any(ip in ipaddress.ip_network(cidr) for cidr in block.get("except") or ())
    if "namespaceSelector" in peer:
        in_namespace = selects(peer["namespaceSelector"], source.ns_labels())
    else:
        in_namespace = source.namespace == policy_ns  # podSelector alone: the policy's namespace
    return in_namespace and selects(peer.get("podSelector") or {}, source.labels)


def admits(policies: list[dict[str, Any]], target: Pod, port: int, source: Pod) -> bool:
    """Whether `source` may open a TCP connection to `target`:`port` under `policies`."""
    selecting = [p for p in policies if p["metadata"]["namespace"] == target.namespace
                 and "Ingress" in p["spec"]["policyTypes"] and selects(p["spec"]["podSelector"], target.labels)]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or ():
            ports = rule.get("ports")
            if ports and not any(p.get("protocol", "TCP") == "TCP" and p.get("port") in (None, port)
                                 for p in ports):
                continue
            peers = rule.get("from")
            if not peers or any(peer_matches(peer, policy["metadata"]["namespace"], source) for peer in peers):
                return True
    return False


# --- the evaluator on its own -------------------------------------------------------------

def policy(ingress, selector=None, namespace="a"):
    return {"metadata": {"name": "p", "namespace": namespace},
            "spec": {"podSelector": selector or {}, "policyTypes": ["Ingress"], "ingress": ingress}}


@pytest.mark.parametrize("policies,source,admitted", [
    ([], Pod("b"), True),
    ([policy([])], Pod("a"), False),
    ([policy([{}])], Pod("b"), True),
    ([policy([{"from": [{"podSelector": {"matchLabels": {"x": "1"}}}]}])], Pod("b", {"x": "1"}), False),
    ([policy([{"from": [{"podSelector": {"matchLabels": {"x": "1"}}}]}])], Pod("a", {"x": "1"}), True),
    ([policy([{"from": [{"namespaceSelector": {"matchLabels": {NS_LABEL: "b"}},
                         "podSelector": {"matchLabels": {"x": "1"}}}]}])], Pod("b", {"x": "2"}), False),
    ([policy([{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]}])], Pod("b"), False),
    ([policy([{"ports": [{"protocol": "TCP", "port": 81}]}])], Pod("b"), False),
], ids=["no-policy", "deny-all", "allow-all", "pod-selector-is-own-namespace", "same-namespace-pod",
        "both-selectors-both-needed", "ip-except", "other-port"])
def test_the_evaluator_follows_kubernetes_semantics(policies, source, admitted):
    assert admits(policies, Pod("a"), 80, source) is admitted


# --- the fleet's policies ------------------------------------------------------------------

SCORING = Pod("team-a", {"scoring.fleet.dev/fleet": "qwen", "app.kubernetes.io/component": "scorer"})
GATEWAY = Pod("team-a", {"scoring.fleet.dev/gateway": "qwen", "app.kubernetes.io/component": "gateway",
                         "serves.scoring.fleet.dev/qwen": "true"})
OTHER_GATEWAY = Pod("team-a", {"scoring.fleet.dev/gateway": "other", "serves.scoring.fleet.dev/other": "true"})
# another fleet's gateway that lists qwen in its spec.gateway.fleets
FRONT_DOOR = Pod("team-a", {"scoring.fleet.dev/gateway": "front", "serves.scoring.fleet.dev/front": "true",
                            "serves.scoring.fleet.dev/qwen": "true"})
NEIGHBOUR = Pod("team-a", {"app": "batch-job"})
OPERATOR = Pod("scoring-system", {"app.kubernetes.io/component": "operator"})
PROMETHEUS = Pod("monitoring", {"app.kubernetes.io/name": "prometheus"})
# a namesake in another namespace
ELSEWHERE = Pod("team-b", {"scoring.fleet.dev/gateway": "qwen", "serves.scoring.fleet.dev/qwen": "true"})
OFFICE = Pod("ingress", {"app": "ingress-nginx"}, ip="10.20.3.4")


def children(**spec):
    return build_children(parse_fleet("qwen", "team-a", {"model": {"source": "m"}, "image": IMAGE,
                                                        "gateway": {"enabled": True}, **spec},
                                      OperatorConfig(namespace="scoring-system")))


@pytest.mark.parametrize("source,admitted", [
    (GATEWAY, True), (FRONT_DOOR, True), (OPERATOR, True), (PROMETHEUS, True),
    (NEIGHBOUR, False), (OTHER_GATEWAY, False), (ELSEWHERE, False), (OFFICE, False), (SCORING, False),
], ids=["gateway", "a-gateway-that-routes-to-it", "operator", "listed-prometheus", "neighbour",
        "another-fleets-gateway", "namesake-elsewhere", "outside", "another-scoring-pod"])
def test_the_scoring_pods_admit_only_their_gateways_the_operator_and_the_listed_peers(source, admitted):
    policies = [c for c in children(networkPolicy={"allowFrom": [
        {"namespaceSelector": {"matchLabels": {NS_LABEL: "monitoring"}}}]}) if c["kind"] == "NetworkPolicy"]
    assert admits(policies, SCORING, 30000, source) is admitted
    assert not admits(policies, SCORING, 30001, GATEWAY)  # only the server's port


@pytest.mark.parametrize("allow,source,admitted", [
    ([], NEIGHBOUR, True), ([], OFFICE, True), ([], ELSEWHERE, True),
    ([{"ipBlock": {"cidr": "10.20.0.0/16"}}], OFFICE, True),
    ([{"ipBlock": {"cidr": "10.20.0.0/16"}}], NEIGHBOUR, False),
    ([{"ipBlock": {"cidr": "10.20.0.0/16"}}], OPERATOR, True),
    ([{"ipBlock": {"cidr": "10.20.0.0/16"}}], PROMETHEUS, False),
], ids=["anyone-neighbour", "anyone-outside", "anyone-elsewhere", "listed-cidr", "unlisted",
        "listed-still-the-operator", "listed-not-prometheus"])
def test_the_gateway_admits_anyone_unless_told(allow, source, admitted):
    policies = [c for c in children(networkPolicy={"gatewayAllowFrom": allow}) if c["kind"] == "NetworkPolicy"]
    assert admits(policies, GATEWAY, 30080, source) is admitted


def test_disabled_the_fleet_has_no_policy_and_its_pods_admit_anyone():
    policies = [c for c in children(networkPolicy={"enabled": False}) if c["kind"] == "NetworkPolicy"]
    assert policies == [] and admits(policies, SCORING, 30000, NEIGHBOUR)


def test_the_gateway_pods_carry_what_the_scoring_pods_admit():
    # the labels the builder puts on the gateway's pods, not a hand-written copy of them
    [deployment] = [c for c in children() if c["kind"] == "Deployment" and c["metadata"]["name"] == "qwen-gateway"]
    policies = [c for c in children() if c["kind"] == "NetworkPolicy"]
    assert admits(policies, SCORING, 30000, Pod("team-a", deployment["spec"]["template"]["metadata"]["labels"]))
