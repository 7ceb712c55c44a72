"""Pure: the parts every pod the operator builds shares, the scoring server's and the gateway's.

One home, so the two Deployments cannot drift apart: the security contexts (the restricted Pod
Security Standard: non-root as the image's user, no privilege escalation, a read-only root
filesystem, every capability dropped, the runtime's default seccomp profile; tests/reliability/pss.py
holds the checks), the preStop sleep and the grace period it is part of, the HTTP probes, the
Prometheus scrape annotations and the API key's env var. What differs (paths, periods, the process's
own shutdown bound) is passed in. Each call returns fresh dicts: a builder's object is its own.
"""
from __future__ import annotations

from typing import Any

from fleet_operator.spec.fleet import FleetSpec
from scoringfleet_contract.facts import API_KEY_ENV, HTTP_PORT_NAME, METRICS_PATH

RUN_AS_UID = 65532  # the image's non-root user
PRESTOP_SLEEP_S = 5  # long enough for endpoints to drop the pod before it stops admitting
# After the process's own shutdown bound: the interpreter's exit, and a kubelet that sends SIGTERM
# a little late.
EXIT_MARGIN_S = 5
PROBE_TIMEOUT_S = 5


def pod_security_context() -> dict[str, Any]:
    """The pod's: its user and group, fsGroup for the emptyDir volumes, seccomp."""
    return {
        "runAsNonRoot": True, "runAsUser": RUN_AS_UID, "runAsGroup": RUN_AS_UID,
        "fsGroup": RUN_AS_UID, "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    """Each container's: what the restricted standard asks of a container itself."""
    return {
        "runAsNonRoot": True, "runAsUser": RUN_AS_UID, "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def grace_s(shutdown_s: int) -> int:
    """terminationGracePeriodSeconds for a process that ends within `shutdown_s` of its SIGTERM:
    the preStop sleep before it, then that, then a margin; so the kubelet never kills a process
    that is keeping its word."""
    return PRESTOP_SLEEP_S + shutdown_s + EXIT_MARGIN_S


def prestop_sleep() -> dict[str, Any]:
    """The container lifecycle that sleeps PRESTOP_SLEEP_S before SIGTERM, so Services and the
    gateway's watch drop the pod while it still admits work.
    NOTE: exec the image's python, not `sleep`: the image need not ship coreutils (nor a shell)."""
    return {"preStop": {"exec": {"command": [
        "python", "-c", f"import time; time.sleep({PRESTOP_SLEEP_S})"]}}}


def http_probe(path: str, period_s: int, failure_threshold: int = 3) -> dict[str, Any]:
    """A probe that GETs `path` on the container's port named http."""
    return {"httpGet": {"path": path, "port": HTTP_PORT_NAME}, "periodSeconds": period_s,
            "timeoutSeconds": PROBE_TIMEOUT_S, "failureThreshold": failure_threshold}


def scrape_annotations(port: int) -> dict[str, str]:
    """The pod template's annotations that point a Prometheus' pod discovery at /metrics."""
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port),
            "prometheus.io/path": METRICS_PATH}


def api_key_env(fleet: FleetSpec) -> list[dict[str, Any]]:
    """API_KEY_ENV from spec.auth.apiKeySecretRef (none without it): the server checks it, the
    gateway checks it and sends it on to the workers. An env var, not a flag: a key in args would
    be readable by anyone who can read the pod spec."""
    ref = fleet.auth.api_key
    return [] if ref is None else [ref.env(API_KEY_ENV)]
