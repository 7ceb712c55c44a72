"""Pure functions: FleetSpec -> the fleet's children as plain Kubernetes dicts.

Each builder returns the whole desired object (no ownerReferences: the reconciler adopts them), so the
reconciler can create it, or compare it with what is there and patch the difference. Empty optional
fields are left out rather than sent as {} or [], because the API server drops them and a comparison
would then see drift forever.
"""
from __future__ import annotations

from typing import Any

from fleet_operator.autoscaling_spec import ScalingRules
from fleet_operator.spec import FleetSpec

API_GROUP = "scoring.fleet.dev"
API_VERSION = f"{API_GROUP}/v1alpha1"
KIND = "ScoringFleet"
FLEET_LABEL = f"{API_GROUP}/fleet"
GPU_RESOURCE = "nvidia.com/gpu"
RUN_AS_UID = 65532  # the image's non-root user
CONTAINER_NAME = "server"
CACHE_DIR = "/cache"  # HF_HOME lives here: the root filesystem is read-only
PRESTOP_SLEEP_S = 5  # long enough for endpoints to drop the pod before it stops admitting
# Beyond preStop + the longest request: time for the server to answer what it admitted and exit.
SHUTDOWN_MARGIN_S = 15
# Adapter-renamed series (Prometheus names cannot carry ':' through the custom metrics API):
# running + waiting sequences per pod, see docs/operator.md for the adapter rule.
HPA_METRIC = "sglang_load"


def selector_labels(name: str) -> dict[str, str]:
    """The one label that selects a fleet's pods (Deployment, Service, PDB, status.selector)."""
    return {FLEET_LABEL: name}


def selector_string(name: str) -> str:
    """status.selector, the label selector the scale subresource reports."""
    return f"{FLEET_LABEL}={name}"


def fleet_labels(name: str) -> dict[str, str]:
    return {
        **selector_labels(name),
        "app.kubernetes.io/name": "scoring-server",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "scorer",
        "app.kubernetes.io/part-of": "scoring-fleet",
        "app.kubernetes.io/managed-by": "scoring-fleet-operator",
    }


def server_args(fleet: FleetSpec) -> list[str]:
    """The server's command-line flags, from spec.model and spec.server."""
    srv = fleet.server
    # No --max-prefill-tokens unless set: the server's default depends on its device.
    prefill = [] if srv.max_prefill_tokens is None else [
        "--max-prefill-tokens", str(srv.max_prefill_tokens)]
    return [
        "--model-path", fleet.model.source,
        "--served-model-name", fleet.model.served_name,
        "--host", "0.0.0.0",
        "--port", str(srv.port),
        "--dtype", fleet.model.dtype,
        "--device", "cuda" if fleet.resources.gpus > 0 else "cpu",
        "--max-running-requests", str(srv.max_running_requests),
        *prefill,
        "--max-total-tokens", str(srv.max_total_tokens),
        "--max-queued-requests", str(srv.max_queued_requests),
        "--request-timeout", str(srv.request_timeout_s),
    ]


def termination_grace_s(fleet: FleetSpec) -> int:
    return PRESTOP_SLEEP_S + fleet.server.request_timeout_s + SHUTDOWN_MARGIN_S


def build_deployment(fleet: FleetSpec) -> dict[str, Any]:
    labels = fleet_labels(fleet.name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": fleet.name, "namespace": fleet.namespace, "labels": labels},
        "spec": {
            "replicas": fleet.replicas,
            "selector": {"matchLabels": selector_labels(fleet.name)},
            # One extra pod at a time and never below the current size: a rollout keeps the fleet's
            # capacity (it needs room for one more GPU pod, not for a whole new ReplicaSet).
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": labels, "annotations": _scrape_annotations(fleet)},
                "spec": _pod_spec(fleet),
            },
        },
    }


def _scrape_annotations(fleet: FleetSpec) -> dict[str, str]:
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(fleet.server.port),
            "prometheus.io/path": "/metrics"}


def _pod_spec(fleet: FleetSpec) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "terminationGracePeriodSeconds": termination_grace_s(fleet),
        "securityContext": {
            "runAsNonRoot": True, "runAsUser": RUN_AS_UID, "runAsGroup": RUN_AS_UID,
            "fsGroup": RUN_AS_UID, "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [_container(fleet)],
        "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "cache", "emptyDir": {}}],
    }
    if fleet.node_selector:
        pod["nodeSelector"] = dict(fleet.node_selector)
    tolerations = _tolerations(fleet)
    if tolerations:
        pod["tolerations"] = tolerations
    if fleet.affinity:
        pod["affinity"] = dict(fleet.affinity)
    return pod


def _tolerations(fleet: FleetSpec) -> list[dict[str, Any]]:
    tolerations = [dict(t) for t in fleet.tolerations]
    # GPU nodes are commonly tainted nvidia.com/gpu:NoSchedule; tolerate it unless the user did.
    if fleet.resources.gpus > 0 and not any(t.get("key") == GPU_RESOURCE for t in tolerations):
        tolerations.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    return tolerations


def _container(fleet: FleetSpec) -> dict[str, Any]:
    http = {"port": "http"}
    return {
        "name": CONTAINER_NAME,
        "image": fleet.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "server"],
        "args": server_args(fleet),
        "ports": [{"name": "http", "containerPort": fleet.server.port, "protocol": "TCP"}],
        "env": _env(fleet),
        "resources": _resources(fleet),
        # Model loading can take minutes (download, then load): the startup probe holds liveness off
        # for up to 10 minutes; after that, a hung process is restarted within ~30 s.
        "startupProbe": {"httpGet": {"path": "/health", **http}, "periodSeconds": 10,
                         "timeoutSeconds": 5, "failureThreshold": 60},
        "livenessProbe": {"httpGet": {"path": "/health", **http}, "periodSeconds": 10,
                          "timeoutSeconds": 5, "failureThreshold": 3},
        # Readiness: model loaded and loop alive; 503 while draining, so endpoints drop the pod.
        "readinessProbe": {"httpGet": {"path": "/health_generate", **http}, "periodSeconds": 5,
                           "timeoutSeconds": 5, "failureThreshold": 3},
        # NOTE: exec python, not `sleep`: the image need not ship coreutils.
        "lifecycle": {"preStop": {"exec": {"command": [
            "python", "-c", f"import time; time.sleep({PRESTOP_SLEEP_S})"]}}},
        "securityContext": {
            "runAsNonRoot": True, "runAsUser": RUN_AS_UID, "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"},
                         {"name": "cache", "mountPath": CACHE_DIR}],
    }


def _env(fleet: FleetSpec) -> list[dict[str, Any]]:
    """Our defaults first, then the user's; a user variable of the same name replaces ours."""
    ours = [{"name": "HF_HOME", "value": f"{CACHE_DIR}/huggingface"},
            {"name": "PYTHONUNBUFFERED", "value": "1"}]
    user_names = {var["name"] for var in fleet.env}
    return [v for v in ours if v["name"] not in user_names] + [dict(v) for v in fleet.env]


def _resources(fleet: FleetSpec) -> dict[str, Any]:
    res = fleet.resources
    requests = {"cpu": res.cpu, "memory": res.memory}
    limits: dict[str, str] = {"cpu": res.cpu, "memory": res.memory}
    if res.gpus > 0:
        limits[GPU_RESOURCE] = str(res.gpus)  # strings: the kubernetes client validates models
    return {"requests": requests, "limits": limits}


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


def build_hpa(fleet: FleetSpec) -> dict[str, Any]:
    """autoscaling/v2 HPA (hpa mode) that scales the ScoringFleet itself through its scale subresource."""
    a = fleet.autoscaling
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": fleet.name, "namespace": fleet.namespace,
                     "labels": fleet_labels(fleet.name)},
        "spec": {
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": KIND, "name": fleet.name},
            "minReplicas": a.min_replicas,
            "maxReplicas": a.max_replicas,
            "metrics": [{
                "type": "Pods",
                "pods": {"metric": {"name": HPA_METRIC},
                         "target": {"type": "AverageValue",
                                    "averageValue": format_quantity(a.target_load_per_replica)}},
            }],
            "behavior": {"scaleUp": _hpa_rules(a.scale_up), "scaleDown": _hpa_rules(a.scale_down)},
        },
    }


def _hpa_rules(rules: ScalingRules) -> dict[str, Any]:
    return {
        "stabilizationWindowSeconds": rules.stabilization_window_s,
        "selectPolicy": rules.select_policy,
        "policies": [{"type": p.type, "value": p.value, "periodSeconds": p.period_s}
                     for p in rules.policies],
    }


def format_quantity(value: float) -> str:
    """A non-negative number as a Kubernetes quantity: 32 -> "32", 0.5 -> "500m"."""
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def build_children(fleet: FleetSpec) -> list[dict[str, Any]]:
    """Every child the fleet should have; the HPA only in hpa mode (one owner of replicas)."""
    children = [build_deployment(fleet), build_service(fleet), build_pdb(fleet)]
    if wants_hpa(fleet):
        children.append(build_hpa(fleet))
    return children


def wants_hpa(fleet: FleetSpec) -> bool:
    return fleet.autoscaling.enabled and fleet.autoscaling.mode == "hpa"
