"""Pure builders: FleetSpec -> the fleet's children as plain Kubernetes dicts, one module per kind.

deployment.py, service.py, pdb.py, hpa.py each return a whole desired object; build_children() says
which the fleet should have. A new kind (a gateway's Deployment and Service, a KEDA ScaledObject
instead of the HPA) is one more module here and one more line below. No I/O.
"""
from __future__ import annotations

from typing import Any

from fleet_operator.builders.deployment import build_deployment, server_args, termination_grace_s
from fleet_operator.builders.hpa import build_hpa, format_quantity
from fleet_operator.builders.pdb import build_pdb
from fleet_operator.builders.service import build_service
from fleet_operator.spec import FleetSpec

__all__ = ["build_children", "build_deployment", "build_hpa", "build_pdb", "build_service",
           "format_quantity", "server_args", "termination_grace_s", "wants_hpa"]


def build_children(fleet: FleetSpec) -> list[dict[str, Any]]:
    """Every child the fleet should have; the HPA only in hpa mode (one owner of replicas)."""
    children = [build_deployment(fleet), build_service(fleet), build_pdb(fleet)]
    if wants_hpa(fleet):
        children.append(build_hpa(fleet))
    return children


def wants_hpa(fleet: FleetSpec) -> bool:
    """An HPA owns the fleet's size (hpa mode): build it; otherwise it must not exist."""
    return fleet.autoscaling.is_hpa
