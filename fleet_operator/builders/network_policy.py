"""Pure: FleetSpec -> the fleet's two NetworkPolicies (networking.k8s.io/v1), ingress only.

The scoring pods' policy (named after the fleet) admits, on the server's port only: the pods of
every gateway that routes to the fleet (its own, another fleet's that lists it in
spec.gateway.fleets: they route requests and read /get_load), the operator's namespace (the native
autoscaler scrapes /metrics from there), spec.networkPolicy.allowFrom (e.g. Prometheus'
namespace) and, with an InferencePool, spec.inferencePool.allowFromNamespaces (the Inference
Gateway's data plane, its EPP); nothing else, so no pod in the cluster can go around the gateway and its key. The
gateway's policy (<fleet>-gateway) admits gatewayAllowFrom, or anyone when that is empty: it is
the fleet's front door, and the rule says so even in a namespace whose default is deny. A listed
gatewayAllowFrom also admits the operator's namespace: the native autoscaler reads the gateway's
waiting requests from there, the only signal that wakes a fleet at 0. Egress is
not restricted (the hub, the API server, the workers). Each rule is one ingress entry, so
`kubectl describe networkpolicy` reads as the list below.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet_operator.names import (
    fleet_labels,
    gateway_labels,
    gateway_name,
    gateway_selector_labels,
    selector_labels,
    serves_selector_labels,
)
from fleet_operator.spec.fleet import FleetSpec

NETWORKING_API = "networking.k8s.io/v1"
# Every namespace carries this label (set by the API server since Kubernetes 1.21).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def build_network_policy(fleet: FleetSpec) -> dict[str, Any]:
    """The scoring pods' policy: only the gateway, the operator's namespace and the listed peers."""
    policy = fleet.network_policy
    # every gateway that routes to this fleet: its own, and another fleet's that lists it
    peers: list[dict[str, Any]] = [{"podSelector": {"matchLabels": serves_selector_labels(fleet.name)}}]
    peers += _operator_peers(fleet)
    peers += [dict(peer) for peer in policy.allow_from]
    if fleet.inference_pool.enabled:  # the Inference Gateway's data plane forwards, its EPP scrapes
        peers += [_namespace_peer(ns) for ns in fleet.inference_pool.allow_from_namespaces]
    return _policy(fleet.name, fleet.namespace, fleet_labels(fleet.name), selector_labels(fleet.name),
                   [_rule(fleet.server.port, [peer]) for peer in peers])


def build_gateway_network_policy(fleet: FleetSpec) -> dict[str, Any]:
    """The gateway's policy: its port from gatewayAllowFrom (and the operator's namespace, for the
    demand scrape), or from anywhere when none is listed."""
    listed = fleet.network_policy.gateway_allow_from
    port = fleet.gateway.port
    rules = [_rule(port, [dict(peer) for peer in listed] + _operator_peers(fleet))] if listed else \
        [_rule(port, None)]
    return _policy(gateway_name(fleet.name), fleet.namespace, gateway_labels(fleet.name),
                   gateway_selector_labels(fleet.name), rules)


def _operator_peers(fleet: FleetSpec) -> list[dict[str, Any]]:
    """The operator's namespace as a peer (its scrapes come from there), or none when unknown."""
    namespace = fleet.network_policy.operator_namespace
    return [] if namespace is None else [_namespace_peer(namespace)]


def _namespace_peer(namespace: str) -> dict[str, Any]:
    return {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}}}


def _rule(port: int, peers: list[dict[str, Any]] | None) -> dict[str, Any]:
    """One ingress rule: TCP `port` from `peers` (None: from anywhere)."""
    rule: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": port}]}
    if peers is not None:
        rule["from"] = peers
    return rule


def _policy(name: str, namespace: str, labels: Mapping[str, str], selector: Mapping[str, str],
            ingress: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": NETWORKING_API,
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "podSelector": {"matchLabels": dict(selector)},
            # Explicit: left out, the API server would fill it in, and the children would differ.
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }
