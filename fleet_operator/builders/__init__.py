"""Pure builders: FleetSpec -> the fleet's children as plain Kubernetes dicts, one module per kind.

deployment.py, service.py, pdb.py, hpa.py, scaled_object.py, gateway.py, gateway_rbac.py,
network_policy.py and inference_pool.py each return whole desired objects; build_children() says which the fleet should
have (the HPA in hpa mode, the ScaledObject in keda mode, the gateway's five with
spec.gateway.enabled, the NetworkPolicies unless spec.networkPolicy.enabled is false, the
InferencePool with spec.inferencePool.enabled),
unwanted_children() which must go. A new kind is one more module here and one more line below. No I/O.
"""
from __future__ import annotations

from typing import Any

from fleet_operator.builders.deployment import build_deployment, server_args, termination_grace_s
from fleet_operator.builders.gateway import (
    build_gateway_deployment,
    build_gateway_service,
    gateway_address,
)
from fleet_operator.builders.gateway_rbac import (
    RBAC_API,
    build_gateway_role,
    build_gateway_role_binding,
    build_gateway_service_account,
)
from fleet_operator.builders.hpa import build_hpa, format_quantity
from fleet_operator.builders.inference_pool import INFERENCE_API, build_inference_pool
from fleet_operator.builders.network_policy import (
    NETWORKING_API,
    build_gateway_network_policy,
    build_network_policy,
)
from fleet_operator.builders.pdb import build_pdb
from fleet_operator.builders.scaled_object import build_scaled_object, scaled_object_params
from fleet_operator.builders.service import build_service
from fleet_operator.names import gateway_name
from fleet_operator.spec.fleet import FleetSpec

# The gateway's children, in creation order (its pods need the ServiceAccount first).
GATEWAY_BUILDERS = (build_gateway_service_account, build_gateway_role, build_gateway_role_binding,
                    build_gateway_deployment, build_gateway_service)
# Their deletion order: the pods first, the ServiceAccount they run as last.
GATEWAY_DELETION_ORDER = (("apps/v1", "Deployment"), ("v1", "Service"), (RBAC_API, "RoleBinding"),
                          (RBAC_API, "Role"), ("v1", "ServiceAccount"))

__all__ = ["build_children", "build_deployment", "build_gateway_network_policy", "build_hpa",
           "build_inference_pool",
           "build_network_policy", "build_pdb", "build_service", "build_scaled_object", "format_quantity",
           "gateway_address", "network_policies", "scaled_object_params", "server_args",
           "termination_grace_s", "unwanted_children", "wants_hpa", "wants_scaled_object"]


def build_children(fleet: FleetSpec) -> list[dict[str, Any]]:
    """Every child the fleet should have; the HPA only in hpa mode, the ScaledObject only in keda
    mode (one owner of replicas: KEDA makes its own HPA). The NetworkPolicies come first, so no pod
    they guard exists before them."""
    children = network_policies(fleet)
    children += [build_deployment(fleet), build_service(fleet), build_pdb(fleet)]
    if wants_hpa(fleet):
        children.append(build_hpa(fleet))
    if wants_scaled_object(fleet):
        children.append(build_scaled_object(scaled_object_params(fleet)))
    if fleet.gateway.enabled:
        children += [build(fleet) for build in GATEWAY_BUILDERS]
    if fleet.inference_pool.enabled:
        children.append(build_inference_pool(fleet))
    return children


def unwanted_children(fleet: FleetSpec) -> list[tuple[str, str, str]]:
    """(apiVersion, kind, name) of children the fleet must not have: the HPA outside hpa mode, the
    ScaledObject outside keda mode (these first: KEDA's admission webhook refuses a ScaledObject on
    a target another HPA manages), the gateway's when it is disabled (in GATEWAY_DELETION_ORDER),
    the InferencePool when spec.inferencePool is disabled.
    Only names: the reconciler deletes one only if this fleet owns it."""
    unwanted = []
    if not wants_hpa(fleet):
        unwanted.append(("autoscaling/v2", "HorizontalPodAutoscaler", fleet.name))
    if not wants_scaled_object(fleet):
        unwanted.append(("keda.sh/v1alpha1", "ScaledObject", fleet.name))
    if not fleet.gateway.enabled:
        unwanted += [(api_version, kind, gateway_name(fleet.name)) for api_version, kind in GATEWAY_DELETION_ORDER]
    # After the pods they guard (the gateway's just above): never an unguarded pod on the way out.
    if not fleet.network_policy.enabled:
        unwanted.append((NETWORKING_API, "NetworkPolicy", fleet.name))
    if not (fleet.network_policy.enabled and fleet.gateway.enabled):
        unwanted.append((NETWORKING_API, "NetworkPolicy", gateway_name(fleet.name)))
    if not fleet.inference_pool.enabled:
        unwanted.append((INFERENCE_API, "InferencePool", fleet.name))
    return unwanted


def network_policies(fleet: FleetSpec) -> list[dict[str, Any]]:
    """The scoring pods' NetworkPolicy, and the gateway's when it is enabled; none when disabled."""
    if not fleet.network_policy.enabled:
        return []
    policies = [build_network_policy(fleet)]
    if fleet.gateway.enabled:
        policies.append(build_gateway_network_policy(fleet))
    return policies


def wants_hpa(fleet: FleetSpec) -> bool:
    """An HPA owns the fleet's size (hpa mode): build it; otherwise it must not exist."""
    return fleet.autoscaling.is_hpa


def wants_scaled_object(fleet: FleetSpec) -> bool:
    """KEDA owns the fleet's size (keda mode): build its ScaledObject; otherwise it must not exist."""
    return fleet.autoscaling.is_keda
