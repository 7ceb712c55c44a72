"""Pure: FleetSpec -> the fleet's Deployment (pod template, probes, drain) and server flags.

The whole desired object, no ownerReferences (the reconciler adopts it); what every pod of ours has
(security contexts, preStop, probes, scrape annotations, the key's env, the grace sum) is pods.py's,
shared with the gateway's pods. Empty optional fields are left out rather than sent
as {} or [], because the API server drops them and a comparison would then see drift forever.
"""
from __future__ import annotations

import math
from typing import Any

from fleet_operator.builders.inference_pool import ENGINE_TYPE, ENGINE_TYPE_LABEL
from fleet_operator.builders.pods import (
    api_key_env,
    container_security_context,
    grace_s,
    http_probe,
    pod_security_context,
    prestop_sleep,
    scrape_annotations,
)
from fleet_operator.names import fleet_labels, selector_labels
from fleet_operator.spec.fleet import FleetSpec
from scoringfleet_contract.facts import HEALTH_GENERATE_PATH, HEALTH_PATH, HTTP_PORT_NAME, SERVER_SHUTDOWN_S

GPU_RESOURCE = "nvidia.com/gpu"
CONTAINER_NAME = "server"
CACHE_DIR = "/cache"  # the image's HOME, a per-pod emptyDir: the root filesystem is read-only
HF_HOME = f"{CACHE_DIR}/huggingface"  # the hub client's cache; spec.model.cache is mounted here
MODEL_CACHE_VOLUME = "model-cache"
# spec.server.rerankTemplate.configMapKeyRef: the ConfigMap's key, mounted read-only as this file.
RERANK_TEMPLATE_VOLUME = "rerank-template"
RERANK_TEMPLATE_DIR = "/etc/scoringfleet/rerank"
RERANK_TEMPLATE_FILE = "template.json"
STARTUP_PERIOD_S = 10


def server_args(fleet: FleetSpec) -> list[str]:
    """The server's command-line flags, from spec.model and spec.server."""
    srv = fleet.server
    # No --max-prefill-tokens unless set: the server's default depends on its device.
    prefill = [] if srv.max_prefill_tokens is None else [
        "--max-prefill-tokens", str(srv.max_prefill_tokens)]
    return [
        "--model-path", fleet.model.source,
        "--served-model-name", fleet.model.served_name, *fleet.model.aliases,
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
        *_rerank_template_args(fleet),
        *_lora_args(fleet),
    ]


def _lora_args(fleet: FleetSpec) -> list[str]:
    adapters = fleet.model.lora_adapters
    return ["--lora-paths", *(f"{a.name}={a.path}" for a in adapters)] if adapters else []


def _rerank_template_args(fleet: FleetSpec) -> list[str]:
    """A built-in's name, or the mounted ConfigMap key's file; none: the server picks by model."""
    template = fleet.server.rerank_template
    if template is None:
        return []
    if isinstance(template, str):
        return ["--rerank-template", template]
    return ["--rerank-template", f"{RERANK_TEMPLATE_DIR}/{RERANK_TEMPLATE_FILE}"]


def drain_timeout_s(fleet: FleetSpec) -> int:
    """How long a SIGTERM drain may wait for admitted work: the request timeout, since every admitted
    request ends (answered or 504) within it; a shorter drain would cut requests that could finish."""
    return fleet.server.request_timeout_s


def termination_grace_s(fleet: FleetSpec) -> int:
    """Seconds from the pod's deletion to SIGKILL: the preStop sleep, the whole drain, the server's
    last responses and a margin (pods.grace_s), so the kubelet never kills a drain keeping its word."""
    return grace_s(drain_timeout_s(fleet) + SERVER_SHUTDOWN_S)


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
                # the engine type tells an Inference Gateway's EPP how to read the pods' /metrics
                "metadata": {"labels": {**labels, ENGINE_TYPE_LABEL: ENGINE_TYPE},
                             "annotations": scrape_annotations(fleet.server.port)},
                "spec": _pod_spec(fleet),
            },
        },
    }


def _pod_spec(fleet: FleetSpec) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "terminationGracePeriodSeconds": termination_grace_s(fleet),
        "securityContext": pod_security_context(),
        "containers": [_container(fleet)],
        "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "cache", "emptyDir": {}},
                    *_model_cache_volume(fleet), *_rerank_template_volume(fleet)],
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
    return {
        "name": CONTAINER_NAME,
        "image": fleet.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "server"],
        "args": server_args(fleet),
        "ports": [{"name": HTTP_PORT_NAME, "containerPort": fleet.server.port, "protocol": "TCP"}],
        "env": _env(fleet),
        "resources": _resources(fleet),
        # Loading is not liveness: a download and a load can take minutes. The server listens from
        # its first second (/health 200, its load reported as loading), but the startup probe waits
        # for the model (/health_generate) for spec.server.startupTimeoutSeconds, so a load that
        # hangs restarts the container; after that, a hung process is restarted within ~30 s.
        "startupProbe": http_probe(HEALTH_GENERATE_PATH, STARTUP_PERIOD_S, startup_failure_threshold(fleet)),
        "livenessProbe": http_probe(HEALTH_PATH, 10),
        # Readiness: model loaded and loop alive; 503 while draining, so endpoints drop the pod.
        "readinessProbe": http_probe(HEALTH_GENERATE_PATH, 5),
        "lifecycle": prestop_sleep(),
        "securityContext": container_security_context(),
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"},
                         {"name": "cache", "mountPath": CACHE_DIR}, *_model_cache_mount(fleet),
                         *_rerank_template_mount(fleet)],
    }


def startup_failure_threshold(fleet: FleetSpec) -> int:
    """Failed startup probes allowed: enough periods to cover spec.server.startupTimeoutSeconds."""
    return math.ceil(fleet.server.startup_timeout_s / STARTUP_PERIOD_S)


def hf_home(fleet: FleetSpec) -> str:
    """Where the server's hub client keeps its cache: ours, or the user's plain HF_HOME value."""
    for var in fleet.env:
        if var["name"] == "HF_HOME" and isinstance(var.get("value"), str) and var["value"]:
            return var["value"]
    return HF_HOME


def _model_cache_volume(fleet: FleetSpec) -> list[dict[str, Any]]:
    """spec.model.cache as a volume (weights downloaded once per volume); none without it, and
    HF_HOME is then inside the pod's own emptyDir (each pod downloads)."""
    cache = fleet.model.cache
    return [] if cache is None else [cache.volume(MODEL_CACHE_VOLUME)]


def _model_cache_mount(fleet: FleetSpec) -> list[dict[str, Any]]:
    """Mounted at HF_HOME itself, over the emptyDir: only the hub's files go to the shared volume."""
    if fleet.model.cache is None:
        return []
    mount: dict[str, Any] = {"name": MODEL_CACHE_VOLUME, "mountPath": hf_home(fleet)}
    if fleet.model.cache.read_only:
        mount["readOnly"] = True  # left out when false: the API server drops a false readOnly
    return [mount]


def _rerank_template_volume(fleet: FleetSpec) -> list[dict[str, Any]]:
    template = fleet.server.rerank_template
    if template is None or isinstance(template, str):
        return []
    return [template.volume(RERANK_TEMPLATE_VOLUME, RERANK_TEMPLATE_FILE)]


def _rerank_template_mount(fleet: FleetSpec) -> list[dict[str, Any]]:
    if not _rerank_template_volume(fleet):
        return []
    return [{"name": RERANK_TEMPLATE_VOLUME, "mountPath": RERANK_TEMPLATE_DIR, "readOnly": True}]


def _env(fleet: FleetSpec) -> list[dict[str, Any]]:
    """Our defaults first, then the user's; a user variable of the same name replaces ours."""
    ours = [{"name": "HF_HOME", "value": HF_HOME},
            {"name": "PYTHONUNBUFFERED", "value": "1"}]
    model = fleet.model
    if model.cache is not None and model.cache.read_only:
        # A read-only cache must already hold the model: the hub client, online, would ask the hub
        # for the newest revision and take a lock file in the cache before reading it.
        ours.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    if model.hf_token is not None:
        ours.append(model.hf_token.env("HF_TOKEN"))
    ours += api_key_env(fleet)
    user_names = {var["name"] for var in fleet.env}
    return [v for v in ours if v["name"] not in user_names] + [dict(v) for v in fleet.env]


def _resources(fleet: FleetSpec) -> dict[str, Any]:
    res = fleet.resources
    requests = {"cpu": res.cpu, "memory": res.memory}
    limits: dict[str, str] = {"cpu": res.cpu, "memory": res.memory}
    if res.gpus > 0:
        limits[GPU_RESOURCE] = str(res.gpus)  # strings: the kubernetes client validates models
    return {"requests": requests, "limits": limits}
