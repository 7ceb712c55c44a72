"""Pure: FleetSpec -> the fleet's Deployment (pod template, probes, drain, security) and server flags.

The whole desired object, no ownerReferences (the reconciler adopts it). Empty optional fields are
left out rather than sent as {} or [], because the API server drops them and a comparison would then
see drift forever.
"""
from __future__ import annotations

from typing import Any

from fleet_operator.names import fleet_labels, selector_labels
from fleet_operator.spec import FleetSpec

GPU_RESOURCE = "nvidia.com/gpu"
RUN_AS_UID = 65532  # the image's non-root user
CONTAINER_NAME = "server"
CACHE_DIR = "/cache"  # HF_HOME lives here: the root filesystem is read-only
PRESTOP_SLEEP_S = 5  # long enough for endpoints to drop the pod before it stops admitting
# After its drain the server gives uvicorn at most this long to write the last responses
# (server/connections.py SHUTDOWN_GRACE_S), then exits.
SERVER_SHUTDOWN_S = 5
# On top of that: the interpreter's exit, and a kubelet that sends SIGTERM a little late.
EXIT_MARGIN_S = 5


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
        "--drain-timeout", str(drain_timeout_s(fleet)),
    ]


def drain_timeout_s(fleet: FleetSpec) -> int:
    """How long a SIGTERM drain may wait for admitted work: the request timeout, since every admitted
    request ends (answered or 504) within it; a shorter drain would cut requests that could finish."""
    return fleet.server.request_timeout_s


def termination_grace_s(fleet: FleetSpec) -> int:
    """Seconds from the pod's deletion to SIGKILL: the preStop sleep, the whole drain, the server's
    last responses and a margin, so the kubelet never kills a drain that is keeping its word."""
    return PRESTOP_SLEEP_S + drain_timeout_s(fleet) + SERVER_SHUTDOWN_S + EXIT_MARGIN_S


def build_deployment(fleet: FleetSpec) -> dict[str, Any]:
    labels = fleet_labels(fleet.name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": fleet.name, "namespace": fleet.namespace, "labels": labels},
        "spec": {
            "replicas": fleet.replicas,
            "selector": {"matchLabels": selector_labels(fleet.name)},
            # spec.rollout; by default one extra pod at a time and never below the current size: a
            # rollout keeps the fleet's capacity (room for one more GPU pod, not a whole ReplicaSet).
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": fleet.rollout.max_surge,
                                           "maxUnavailable": fleet.rollout.max_unavailable}},
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
