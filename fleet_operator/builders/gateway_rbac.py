"""Pure: FleetSpec -> the gateway's ServiceAccount, and a Role + RoleBinding letting it only read
(get, list, watch) the Pods of the fleet's namespace: its discovery is a watch of the fleet's pods.

The operator must itself hold every right it grants here (Kubernetes' RBAC escalation rule): the
chart gives it pods get/list/watch for that reason.
"""
from __future__ import annotations

from typing import Any

from fleet_operator.names import gateway_labels, gateway_name
from fleet_operator.spec.fleet import FleetSpec

RBAC_API = "rbac.authorization.k8s.io/v1"
# What the gateway reads (gateway/kube_watch.py: list, then watch, of pods by label).
POD_RULE = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}


def _metadata(fleet: FleetSpec) -> dict[str, Any]:
    return {"name": gateway_name(fleet.name), "namespace": fleet.namespace,
            "labels": gateway_labels(fleet.name)}


def build_gateway_service_account(fleet: FleetSpec) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata(fleet)}


def build_gateway_role(fleet: FleetSpec) -> dict[str, Any]:
    return {"apiVersion": RBAC_API, "kind": "Role", "metadata": _metadata(fleet),
            "rules": [POD_RULE]}


def build_gateway_role_binding(fleet: FleetSpec) -> dict[str, Any]:
    name = gateway_name(fleet.name)
    return {
        "apiVersion": RBAC_API, "kind": "RoleBinding", "metadata": _metadata(fleet),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": fleet.namespace}],
    }
