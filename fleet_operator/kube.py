"""The only module that talks to the Kubernetes API (kopf's own watching aside).

Plain dicts in and out over the `kubernetes` client's REST layer: get, create, merge-patch, delete,
create-or-patch of a child (patching only drifted fields), the fleet's status subresource (written
with a resourceVersion precondition, retried on 409) and scale subresource, Pods of a fleet (listed;
annotated), and Events. Errors become ApiError with the HTTP status; callers decide what to retry
(is_retryable). Synchronous: kopf runs sync handlers in its thread pool.
"""
from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeGuard

import kubernetes.client
import kubernetes.config
import urllib3

from fleet_operator import names
from fleet_operator.clock import format_time
from fleet_operator.drift import drift_patch

MERGE_PATCH = "application/merge-patch+json"
# Status writes lost to a concurrent writer are recomputed over the fresh fleet this many times.
MAX_STATUS_ATTEMPTS = 5
PLURALS = {
    "Deployment": "deployments",
    "Service": "services",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "HorizontalPodAutoscaler": "horizontalpodautoscalers",
    "ScaledObject": "scaledobjects",  # keda.sh/v1alpha1
    "InferencePool": "inferencepools",  # inference.networking.k8s.io/v1
    "Pod": "pods",
    "ServiceAccount": "serviceaccounts",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "NetworkPolicy": "networkpolicies",  # networking.k8s.io/v1
    "Event": "events",
    names.KIND: names.PLURAL,
}


class ApiError(Exception):
    """A failed API call: status is the HTTP code (0 when the server was not reached)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


def is_retryable(status: int) -> bool:
    """Conflicts, throttling, server errors and unreachable servers pass; 4xx spec errors do not."""
    return status in (0, 409, 429) or status >= 500


def connect() -> kubernetes.client.ApiClient:
    """An ApiClient from the in-cluster service account, else from KUBECONFIG / ~/.kube/config."""
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_incluster_config(client_configuration=configuration)
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config(client_configuration=configuration)
    return kubernetes.client.ApiClient(configuration=configuration)


def object_path(api_version: str, kind: str, namespace: str, name: str | None = None,
                subresource: str | None = None) -> str:
    """/api/v1/namespaces/ns/services/x or /apis/group/version/namespaces/ns/plural/x[/sub]."""
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{root}/namespaces/{namespace}/{PLURALS[kind]}"
    if name is not None:
        path += f"/{name}"
    if subresource is not None:
        path += f"/{subresource}"
    return path


def request(api: kubernetes.client.ApiClient, method: str, path: str,
            body: Any = None, content_type: str = "application/json",
            query: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One API call; the decoded JSON answer, or ApiError."""
    if query:
        path += "?" + urllib.parse.urlencode(query)
    headers = {"Accept": "application/json", "Content-Type": content_type}
    method, url, headers, body, _ = api.param_serialize(
        method, path, header_params=headers, body=body, auth_settings=["BearerToken"])
    try:
        response = api.call_api(method, url, header_params=headers, body=body,
                                _request_timeout=30)
        response.read()
    except (urllib3.exceptions.HTTPError, OSError) as e:
        raise ApiError(0, "Unreachable", str(e)) from e
    except kubernetes.client.ApiException as e:
        raise ApiError(e.status or 0, str(e.reason), str(e.body)) from e
    data = _decode(response.data)
    if not 200 <= response.status <= 299:
        raise ApiError(response.status, str(data.get("reason") or response.reason),
                       str(data.get("message") or response.data[:200]))
    return data


def _decode(raw: bytes | None) -> dict[str, Any]:
    # Error answers from proxies (or a bare 404 of a missing endpoint) may not be JSON at all.
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def get(api: kubernetes.client.ApiClient, api_version: str, kind: str, namespace: str,
        name: str) -> dict[str, Any] | None:
    """The object, or None if it does not exist."""
    try:
        return request(api, "GET", object_path(api_version, kind, namespace, name))
    except ApiError as e:
        if e.status == 404:
            return None
        raise


def delete(api: kubernetes.client.ApiClient, api_version: str, kind: str, namespace: str,
           name: str, uid: str | None = None) -> bool:
    """Delete if present (and, given `uid`, still that object); True if something was deleted."""
    body = {"preconditions": {"uid": uid}} if uid is not None else None
    try:
        request(api, "DELETE", object_path(api_version, kind, namespace, name), body=body)
    except ApiError as e:
        if e.status == 404 or (uid is not None and e.status == 409):  # gone, or replaced since
            return False
        raise
    return True


def apply(api: kubernetes.client.ApiClient, desired: Mapping[str, Any],
          owned_optional: frozenset[tuple[str, ...]] = frozenset()) -> tuple[str, dict[str, Any]]:
    """Create `desired`, or merge-patch only its drifted fields: ("created"|"patched"|"unchanged", obj).

    Idempotent: a second call with the same object makes no write at all (so watching our own
    children cannot loop).
    """
    meta = desired["metadata"]
    api_version, kind = desired["apiVersion"], desired["kind"]
    actual = get(api, api_version, kind, meta["namespace"], meta["name"])
    if actual is None:
        return "created", request(api, "POST", object_path(api_version, kind, meta["namespace"]),
                                  body=desired)
    patch = drift_patch(desired, actual, owned_optional)
    if patch is None:
        return "unchanged", actual
    path = object_path(api_version, kind, meta["namespace"], meta["name"])
    return "patched", request(api, "PATCH", path, body=patch, content_type=MERGE_PATCH)


def get_fleet(api: kubernetes.client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    return get(api, names.API_VERSION, names.KIND, namespace, name)


def is_live_fleet(body: Mapping[str, Any] | None, uid: str | None = None) -> TypeGuard[Mapping[str, Any]]:
    """The fleet is there, not being deleted, and (given `uid`) the same object, not a namesake."""
    return body is not None and not body["metadata"].get("deletionTimestamp") \
        and (uid is None or body["metadata"].get("uid") == uid)


def patch_fleet_status(api: kubernetes.client.ApiClient, namespace: str, name: str,
                       status: Mapping[str, Any], resource_version: str | None = None) -> dict[str, Any]:
    """Merge `status` into the fleet's .status through the status subresource.

    With resource_version, the write is refused (ApiError 409) if the fleet changed since.
    """
    path = object_path(names.API_VERSION, names.KIND, namespace, name, "status")
    return request(api, "PATCH", path, body=_precondition({"status": dict(status)}, resource_version),
                   content_type=MERGE_PATCH)


def update_fleet_status(api: kubernetes.client.ApiClient, body: Mapping[str, Any],
                        make_patch: Callable[[Mapping[str, Any]], Mapping[str, Any]]
                        ) -> tuple[Mapping[str, Any], Mapping[str, Any]] | None:
    """Write make_patch(fleet) to the fleet's status, computed over the fleet it will land on.

    Optimistic concurrency: the patch carries the resourceVersion of the fleet it was computed
    from; on a 409 the fleet is read again and the patch recomputed, so a merge patch of
    .status.conditions never drops what another writer wrote meanwhile. Returns (the fleet the
    written patch was computed over, the patch; {} when nothing needed writing), or None if the
    fleet is gone.
    """
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    current: Mapping[str, Any] | None = body
    attempts = 0
    while current is not None:
        patch = make_patch(current)
        if not patch:
            return current, patch
        attempts += 1
        try:
            patch_fleet_status(api, namespace, name, patch, current["metadata"].get("resourceVersion"))
            return current, patch
        except ApiError as e:
            if e.status != 409 or attempts == MAX_STATUS_ATTEMPTS:
                raise
        current = get_fleet(api, namespace, name)
    return None


def scale_fleet(api: kubernetes.client.ApiClient, namespace: str, name: str,
                replicas: int, resource_version: str | None = None) -> dict[str, Any]:
    """Set the fleet's .spec.replicas through its scale subresource (what an HPA would do).

    With resource_version, the write is refused (ApiError 409) if the fleet changed since.
    """
    path = object_path(names.API_VERSION, names.KIND, namespace, name, "scale")
    return request(api, "PATCH", path,
                   body=_precondition({"spec": {"replicas": replicas}}, resource_version),
                   content_type=MERGE_PATCH)


def _precondition(patch: dict[str, Any], resource_version: str | None) -> dict[str, Any]:
    if resource_version is None:
        return patch
    return {"metadata": {"resourceVersion": resource_version}, **patch}


def list_fleet_pods(api: kubernetes.client.ApiClient, namespace: str,
                    name: str) -> list[dict[str, Any]]:
    """The fleet's Pods (by the fleet label), in any phase."""
    return list_pods(api, namespace, names.selector_string(name))


def list_pods(api: kubernetes.client.ApiClient, namespace: str,
              label_selector: str) -> list[dict[str, Any]]:
    """The namespace's Pods matching `label_selector`, in any phase."""
    answer = request(api, "GET", object_path("v1", "Pod", namespace),
                     query={"labelSelector": label_selector})
    return list(answer.get("items") or [])


def annotate_pod(api: kubernetes.client.ApiClient, namespace: str, name: str,
                 annotations: Mapping[str, str]) -> dict[str, Any] | None:
    """Merge `annotations` into a Pod's metadata.annotations; None if the pod is gone."""
    try:
        return request(api, "PATCH", object_path("v1", "Pod", namespace, name),
                       body={"metadata": {"annotations": dict(annotations)}},
                       content_type=MERGE_PATCH)
    except ApiError as e:
        if e.status == 404:
            return None
        raise


def post_event(api: kubernetes.client.ApiClient, involved: Mapping[str, Any], type_: str,
               reason: str, message: str, now: datetime) -> dict[str, Any]:
    """A core/v1 Event about `involved` (an object with apiVersion, kind, metadata)."""
    meta = involved["metadata"]
    stamp = format_time(now)
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": involved["apiVersion"], "kind": involved["kind"],
                           "name": meta["name"], "namespace": meta["namespace"],
                           "uid": meta.get("uid")},
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": names.COMPONENT},
        "reportingComponent": names.COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    return request(api, "POST", object_path("v1", "Event", meta["namespace"]), body=event)
