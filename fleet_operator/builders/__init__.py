"""Pure builders: FleetSpec -> the fleet's children as plain Kubernetes dicts, one module per kind.

deployment.py, service.py, pdb.py, hpa.py, scaled_object.py each return a whole desired object;
build_children() says which the fleet should have. A new kind (a gateway's Deployment and Service)
is one more module here and one more line below. No I/O.
"""
from __future__ import annotations

from typing import Any

from fleet_operator.builders.deployment import build_deployment, server_args, termination_grace_s
from fleet_operator.builders.hpa import build_hpa, format_quantity
from fleet_operator.builders.pdb import build_pdb
from fleet_operator.builders.scaled_object import build_scaled_object, scaled_object_params
from fleet_operator.builders.service import build_service
from fleet_operator.spec import FleetSpec

__all__ = ["build_children", "build_deployment", "build_hpa", "build_pdb", "build_service",
           "build_scaled_object", "format_quantity", "scaled_object_params", "server_args",
           "termination_grace_s", "wants_hpa", "wants_scaled_object"]


def build_children(fleet: FleetSpec) -> list[dict[str, Any]]:
    """Every child the fleet should have; the HPA only in hpa mode, the ScaledObject only in keda
    mode (one owner of replicas: KEDA makes its own HPA)."""
    children = [build_deployment(fleet), build_service(fleet), build_pdb(fleet)]
    if wants_hpa(fleet):
        children.append(build_hpa(fleet))
    if wants_scaled_object(fleet):
        children.append(build_scaled_object(scaled_object_params(fleet)))
    return children


def wants_hpa(fleet: FleetSpec) -> bool:
    """An HPA owns the fleet's size (hpa mode): build it; otherwise it must not exist."""
    return fleet.autoscaling.is_hpa


def wants_scaled_object(fleet: FleetSpec) -> bool:
    """KEDA owns the fleet's size (keda mode): build its ScaledObject; otherwise it must not exist."""
    return fleet.autoscaling.is_keda
