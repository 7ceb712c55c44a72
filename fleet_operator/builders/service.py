"""Pure: FleetSpec -> the fleet's ClusterIP Service (port "http" to the pods' named port)."""
from __future__ import annotations

from typing import Any

from fleet_operator.names import fleet_labels, selector_labels
from fleet_operator.spec import FleetSpec


def build_service(fleet: FleetSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": fleet.name, "namespace": fleet.namespace,
                     "labels": fleet_labels(fleet.name)},
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(fleet.name),
            "ports": [{"name": "http", "port": fleet.server.port, "targetPort": "http",
                       "protocol": "TCP"}],
        },
    }
