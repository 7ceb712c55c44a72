"""Pure: FleetSpec -> the fleet's ClusterIP Service (port "http" to the pods' named port), and the
one shape every ClusterIP Service of a fleet has (the gateway's too)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet_operator.names import fleet_labels, selector_labels
from fleet_operator.spec.fleet import FleetSpec
from scoringfleet_contract.facts import HTTP_PORT_NAME


def build_service(fleet: FleetSpec) -> dict[str, Any]:
    return http_service(fleet.name, fleet.namespace, fleet_labels(fleet.name),
                        selector_labels(fleet.name), fleet.server.port)


def http_service(name: str, namespace: str, labels: Mapping[str, str], selector: Mapping[str, str],
                 port: int) -> dict[str, Any]:
    """A ClusterIP Service whose port "http" reaches the selected pods' container port "http"."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "type": "ClusterIP",
            "selector": dict(selector),
            "ports": [{"name": HTTP_PORT_NAME, "port": port, "targetPort": HTTP_PORT_NAME, "protocol": "TCP"}],
        },
    }
