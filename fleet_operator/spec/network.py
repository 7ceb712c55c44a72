"""spec.networkPolicy -> NetworkPolicySpec: whether the fleet has NetworkPolicies, and who else may in.

The operator's namespace is not in the spec: the operator knows it (OperatorConfig, the chart's
downward-API POD_NAMESPACE) and parse_fleet passes it in, because the native autoscaler scrapes the
pods from there. Peers are Kubernetes NetworkPolicyPeers, checked for shape only (the emulator checks
nothing; a real API server checks the rest when the policy is applied). Pure: no I/O.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleet_operator.spec import crd
from fleet_operator.spec.fields import Fields, SpecError, list_of_objects

PEER_KEYS = ("namespaceSelector", "podSelector", "ipBlock")


@dataclass(frozen=True)
class NetworkPolicySpec:
    enabled: bool = crd.default("networkPolicy", "enabled")
    allow_from: tuple[Mapping[str, Any], ...] = ()  # more peers of the scoring pods
    gateway_allow_from: tuple[Mapping[str, Any], ...] = ()  # the gateway's only peers; () = anyone
    operator_namespace: str | None = None  # None: unknown, no rule for the operator's scrape


def parse_network_policy(value: Any, operator_namespace: str | None = None) -> NetworkPolicySpec:
    policy = Fields.of(value, "spec.networkPolicy", crd.spec_schema("networkPolicy"))
    return NetworkPolicySpec(
        enabled=policy.boolean("enabled"),
        allow_from=_peers(policy.value.get("allowFrom"), "spec.networkPolicy.allowFrom"),
        gateway_allow_from=_peers(policy.value.get("gatewayAllowFrom"),
                                  "spec.networkPolicy.gatewayAllowFrom"),
        operator_namespace=operator_namespace,
    )


def _peers(raw: Any, path: str) -> tuple[Mapping[str, Any], ...]:
    peers = list_of_objects(raw, path)
    for i, peer in enumerate(peers):
        here = f"{path}[{i}]"
        unknown = set(peer) - set(PEER_KEYS)
        if unknown or not peer:
            raise SpecError(f"{here} must be a NetworkPolicyPeer: one or more of "
                            f"{', '.join(PEER_KEYS)}, got {sorted(peer) or 'nothing'}")
        for key in ("namespaceSelector", "podSelector"):
            if key in peer and not isinstance(peer[key], Mapping):
                raise SpecError(f"{here}.{key} must be a label selector (an object)")
        block = peer.get("ipBlock")
        if block is not None and not (isinstance(block, Mapping) and isinstance(block.get("cidr"), str)
                                      and block["cidr"]):
            raise SpecError(f"{here}.ipBlock.cidr is required (e.g. 10.0.0.0/8)")
        if "ipBlock" in peer and len(peer) > 1:
            raise SpecError(f"{here}: ipBlock cannot be combined with a selector in one peer")
    return peers
