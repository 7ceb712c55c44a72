"""Pure: FleetSpec -> the fleet's gateway: a Deployment running `python -m gateway` and its Service.

The gateway's pods carry the gateway's labels (names.gateway_labels), never the fleet label, so
nothing that selects scoring pods (the fleet's Deployment, Service, PDB, the Prometheus monitors
and recording rules) takes them in. The control image (no torch) unless the fleet or the operator
says otherwise; what the server's pods have too (security contexts, preStop, probes, scrape
annotations, the key's env, the grace sum) is pods.py's.
The ServiceAccount they run as, and its rights, are gateway_rbac.py's.
"""
from __future__ import annotations

from typing import Any

from fleet_operator.builders.pods import (
    api_key_env,
    container_security_context,
    grace_s,
    http_probe,
    pod_security_context,
    prestop_sleep,
    scrape_annotations,
)
from fleet_operator.builders.service import http_service
from fleet_operator.names import (
    gateway_labels,
    gateway_name,
    gateway_selector_labels,
    serves_selector_labels,
)
from fleet_operator.spec.fleet import FleetSpec
from scoringfleet_contract.facts import GATEWAY_SHUTDOWN_S, HEALTH_PATH, HTTP_PORT_NAME

CONTAINER_NAME = "gateway"
# On SIGTERM the gateway stops listening and lets requests in flight finish for at most
# GATEWAY_SHUTDOWN_S. Kubernetes' default 30 s would cut that short: the preStop sleep, the
# shutdown, a margin.
GATEWAY_GRACE_S = grace_s(GATEWAY_SHUTDOWN_S)


def gateway_args(fleet: FleetSpec) -> list[str]:
    """The gateway's flags: discover this fleet's pods, listen on spec.gateway.port, hold a request
    up to spec.gateway.queueTimeoutSeconds while no pod is ready, pick pods by spec.gateway.policy;
    then the names this fleet serves (model, aliases, adapters), and each of spec.gateway.fleets with
    its names where known (a fleet at 0 is routable only by a name given here: it has no pod to list
    its names)."""
    args = ["--fleet", fleet.name, "--namespace", fleet.namespace,
            "--host", "0.0.0.0", "--port", str(fleet.gateway.port),
            "--queue-timeout", str(fleet.gateway.queue_timeout_s),
            "--policy", fleet.gateway.policy,
            "--fleet-model", f"{fleet.name}={','.join(fleet.model.names)}"]
    for other in fleet.gateway.fleets:
        args += ["--fleet", other]
        if fleet.gateway.fleet_models.get(other):
            args += ["--fleet-model", f"{other}={','.join(fleet.gateway.fleet_models[other])}"]
    return args


def served_fleets(fleet: FleetSpec) -> tuple[str, ...]:
    """The fleets this fleet's gateway routes to: itself first, then spec.gateway.fleets."""
    return (fleet.name, *fleet.gateway.fleets)


def gateway_image(fleet: FleetSpec) -> str:
    """spec.gateway.image, else the operator's gateway image, else the fleet's (it has the gateway)."""
    return fleet.gateway.image or fleet.image


def gateway_address(fleet: FleetSpec) -> str:
    """status.gateway.address: the gateway's Service inside the cluster."""
    return f"http://{gateway_name(fleet.name)}.{fleet.namespace}.svc:{fleet.gateway.port}"


def build_gateway_deployment(fleet: FleetSpec) -> dict[str, Any]:
    labels = gateway_labels(fleet.name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": gateway_name(fleet.name), "namespace": fleet.namespace,
                     "labels": labels},
        "spec": {
            "replicas": fleet.gateway.replicas,
            "selector": {"matchLabels": gateway_selector_labels(fleet.name)},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": {**labels, **_serves_labels(fleet)},
                                      "annotations": scrape_annotations(fleet.gateway.port)},
                         "spec": _pod_spec(fleet)},
        },
    }


def _serves_labels(fleet: FleetSpec) -> dict[str, str]:
    """One label per fleet routed to: each one's NetworkPolicy admits these pods, and its
    autoscaler reads their waiting requests."""
    return {label: value for name in served_fleets(fleet) for label, value in serves_selector_labels(name).items()}


def _pod_spec(fleet: FleetSpec) -> dict[str, Any]:
    return {
        "serviceAccountName": gateway_name(fleet.name),
        "terminationGracePeriodSeconds": GATEWAY_GRACE_S,
        "securityContext": pod_security_context(),
        "containers": [_container(fleet)],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }


def _container(fleet: FleetSpec) -> dict[str, Any]:
    gw = fleet.gateway
    return {
        "name": CONTAINER_NAME,
        "image": gateway_image(fleet),
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "gateway"],
        "args": gateway_args(fleet),
        "ports": [{"name": HTTP_PORT_NAME, "containerPort": gw.port, "protocol": "TCP"}],
        # The key (spec.auth.apiKeySecretRef) checks clients and goes on to the workers.
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, *api_key_env(fleet)],
        "resources": {"requests": {"cpu": gw.cpu, "memory": gw.memory},
                      "limits": {"cpu": gw.cpu, "memory": gw.memory}},
        "livenessProbe": http_probe(HEALTH_PATH, 10),
        # NOTE: readiness on /health, not /ready: /ready fails while the fleet has no ready pod,
        # and a fleet at zero must still reach its gateway for requests to wait and wake it.
        "readinessProbe": http_probe(HEALTH_PATH, 5),
        "lifecycle": prestop_sleep(),
        "securityContext": container_security_context(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }


def build_gateway_service(fleet: FleetSpec) -> dict[str, Any]:
    return http_service(gateway_name(fleet.name), fleet.namespace, gateway_labels(fleet.name),
                        gateway_selector_labels(fleet.name), fleet.gateway.port)
