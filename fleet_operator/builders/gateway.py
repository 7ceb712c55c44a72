"""Pure: FleetSpec -> the fleet's gateway: a Deployment running `python -m gateway` and its Service.

The gateway's pods carry the gateway's labels (names.gateway_labels), never the fleet label, so
nothing that selects scoring pods (the fleet's Deployment, Service, PDB, the Prometheus monitors
and recording rules) takes them in. The control image (no torch) unless the fleet or the operator
says otherwise; the same restricted security context as the server's.
The ServiceAccount they run as, and its rights, are gateway_rbac.py's.
"""
from __future__ import annotations

from typing import Any

from fleet_operator.builders.deployment import EXIT_MARGIN_S, PRESTOP_SLEEP_S, api_key_env, prestop_sleep
from fleet_operator.builders.security import container_security_context, pod_security_context
from fleet_operator.builders.service import http_service
from fleet_operator.names import gateway_labels, gateway_name, gateway_selector_labels
from fleet_operator.spec import FleetSpec

CONTAINER_NAME = "gateway"
# On SIGTERM the gateway stops listening and lets requests in flight finish for at most this long
# (gateway/connections.py SHUTDOWN_TIMEOUT_S; tests/test_shared_constants.py ties the two).
GATEWAY_SHUTDOWN_S = 60
# Kubernetes' default 30 s would cut that short: the preStop sleep, the shutdown, a margin.
GATEWAY_GRACE_S = PRESTOP_SLEEP_S + GATEWAY_SHUTDOWN_S + EXIT_MARGIN_S


def gateway_args(fleet: FleetSpec) -> list[str]:
    """The gateway's flags: discover this fleet's pods, listen on spec.gateway.port, hold a request
    up to spec.gateway.queueTimeoutSeconds while no pod is ready, pick pods by spec.gateway.policy."""
    return ["--fleet", fleet.name, "--namespace", fleet.namespace,
            "--host", "0.0.0.0", "--port", str(fleet.gateway.port),
            "--queue-timeout", str(fleet.gateway.queue_timeout_s),
            "--policy", fleet.gateway.policy]


def gateway_image(fleet: FleetSpec) -> str:
    """spec.gateway.image, else the operator's gateway image, else the fleet's (it has the gateway)."""
    return fleet.gateway.image or fleet.image


def gateway_address(fleet: FleetSpec) -> str:
    """status.gateway.address: the gateway's Service inside the cluster."""
    return f"http://{gateway_name(fleet.name)}.{fleet.namespace}.svc:{fleet.gateway.port}"


def build_gateway_deployment(fleet: FleetSpec) -> dict[str, Any]:
    labels = gateway_labels(fleet.name)
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(fleet.gateway.port),
                   "prometheus.io/path": "/metrics"}
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
            "template": {"metadata": {"labels": labels, "annotations": annotations},
                         "spec": _pod_spec(fleet)},
        },
    }


def _pod_spec(fleet: FleetSpec) -> dict[str, Any]:
    return {
        "serviceAccountName": gateway_name(fleet.name),
        "terminationGracePeriodSeconds": GATEWAY_GRACE_S,
        "securityContext": pod_security_context(),
        "containers": [_container(fleet)],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }


def _container(fleet: FleetSpec) -> dict[str, Any]:
    http = {"port": "http"}
    gw = fleet.gateway
    return {
        "name": CONTAINER_NAME,
        "image": gateway_image(fleet),
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "gateway"],
        "args": gateway_args(fleet),
        "ports": [{"name": "http", "containerPort": gw.port, "protocol": "TCP"}],
        # The key (spec.auth.apiKeySecretRef) checks clients and goes on to the workers.
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}, *api_key_env(fleet)],
        "resources": {"requests": {"cpu": gw.cpu, "memory": gw.memory},
                      "limits": {"cpu": gw.cpu, "memory": gw.memory}},
        "livenessProbe": {"httpGet": {"path": "/health", **http}, "periodSeconds": 10,
                          "timeoutSeconds": 5, "failureThreshold": 3},
        # NOTE: readiness on /health, not /ready: /ready fails while the fleet has no ready pod,
        # and a fleet at zero must still reach its gateway for requests to wait and wake it.
        "readinessProbe": {"httpGet": {"path": "/health", **http}, "periodSeconds": 5,
                           "timeoutSeconds": 5, "failureThreshold": 3},
        "lifecycle": prestop_sleep(),
        "securityContext": container_security_context(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }


def build_gateway_service(fleet: FleetSpec) -> dict[str, Any]:
    return http_service(gateway_name(fleet.name), fleet.namespace, gateway_labels(fleet.name),
                        gateway_selector_labels(fleet.name), fleet.gateway.port)
