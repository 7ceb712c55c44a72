"""Which pods of a fleet are in rotation: pure functions over pod objects (Kubernetes JSON).

In rotation: Ready condition True, no deletionTimestamp (terminating), a pod IP, and a container
port named `http`. The watch that feeds these lives in kube_watch.py.
"""
from __future__ import annotations

from collections.abc import Mapping

from scoringfleet_contract.facts import http_port


def pod_url(pod: Mapping) -> str | None:
    """The pod's worker URL if it should receive requests now, else None."""
    metadata, status = pod.get("metadata") or {}, pod.get("status") or {}
    if metadata.get("deletionTimestamp"):
        return None
    conditions = status.get("conditions") or []
    if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
        return None
    ip, port = status.get("podIP"), http_port(pod)
    if not ip or port is None:
        return None
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}"


def rotation(pods: Mapping[str, Mapping]) -> set[str]:
    """URLs of the pods (by name) that are in rotation."""
    return {url for pod in pods.values() if (url := pod_url(pod)) is not None}


def label_selector(fleet: str, label: str) -> str:
    return f"{label}={fleet}"
