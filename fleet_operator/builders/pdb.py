"""Pure: FleetSpec -> the fleet's PodDisruptionBudget (one pod at a time may be disrupted)."""
from __future__ import annotations

from typing import Any

from fleet_operator.names import fleet_labels, selector_labels
from fleet_operator.spec.fleet import FleetSpec


def build_pdb(fleet: FleetSpec) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": fleet.name, "namespace": fleet.namespace,
                     "labels": fleet_labels(fleet.name)},
        "spec": {
            "selector": {"matchLabels": selector_labels(fleet.name)},
            # maxUnavailable 1, not minAvailable: with 1 replica a minAvailable of 1 would block every
            # node drain forever; one pod at a time keeps a large fleet serving and a small one movable.
            "maxUnavailable": 1,
        },
    }
