"""The operator's pinned RBAC (tests/packaging/test_rbac.py) against what it really calls: run the real
operator through every path (create, scale, native autoscaling with pods, their deletion costs and
Events, hpa mode and back, keda mode with KEDA's CRD installed, re-specified and left, the gateway
enabled and disabled, an InferencePool created and removed, drift, delete) and map each request it
sent to (API group, resource, verb).
Every call must be granted, and every grant must be used or named in GRANTED_FOR_PATHS_NOT_RUN with
its reason.
"""
from __future__ import annotations

import re
import time
from urllib.parse import parse_qs, urlsplit

from tests.fleet_operator.crd_schema import ROOT
from tests.fleet_operator.loopback import free_port, pod_ip
from tests.kit.waiting import wait_for
from tests.packaging.test_rbac import CLUSTER_GRANTS, GRANTED_FOR_PATHS_NOT_RUN, NAMESPACED_GRANTS
from tests.reliability.support import IDLE, MetricsPod, converged, fleet_doc

VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
# Requests the test itself sends (kubectl, kube_api's urllib); the rest are the operator's.
TEST_CLIENTS = re.compile(r"^(kubectl|Python-urllib)")
KEDA_CRD = ROOT / "tests" / "vendor" / "keda" / "keda.sh_scaledobjects.yaml"
POOL_CRD = ROOT / "tests" / "vendor" / "inference-extension" / "inference.networking.k8s.io_inferencepools.yaml"


def grant_of(method: str, path_qs: str) -> tuple[str, str, str] | None:
    """(group, resource[/subresource], verb) of a resource request; None for discovery and /version."""
    split = urlsplit(path_qs)
    parts = split.path.strip("/").split("/")
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    resource = "/".join([rest[0], *rest[2:3]])
    if method == "GET":
        verb = "watch" if parse_qs(split.query).get("watch") in (["true"], ["1"]) else \
            "get" if len(rest) >= 2 else "list"
    else:
        verb = VERBS[method]
    return group, resource, verb


GRANT_CASES = {
    "watch-cluster-wide": ("GET", "/apis/scoring.fleet.dev/v1alpha1/scoringfleets?watch=true",
                           ("scoring.fleet.dev", "scoringfleets", "watch")),
    "list-pods": ("GET", "/api/v1/namespaces/a/pods?labelSelector=x%3Dy", ("", "pods", "list")),
    "get-deployment": ("GET", "/apis/apps/v1/namespaces/a/deployments/d", ("apps", "deployments", "get")),
    "patch-status": ("PATCH", "/apis/scoring.fleet.dev/v1alpha1/namespaces/a/scoringfleets/f/status",
                     ("scoring.fleet.dev", "scoringfleets/status", "patch")),
    "create-event": ("POST", "/api/v1/namespaces/a/events", ("", "events", "create")),
    "discovery": ("GET", "/apis/apps/v1", None),
    "version": ("GET", "/version", None),
}


def test_grant_of_maps_requests_to_rbac_terms():
    for method, path, expected in GRANT_CASES.values():
        assert grant_of(method, path) == expected, path


def test_every_call_the_operator_makes_is_granted_by_the_chart(operator, kube_api):
    cluster, start = operator.cluster, time.monotonic()
    port = free_port([pod_ip(0), pod_ip(1)])
    pods = [MetricsPod(pod_ip(i), port, IDLE) for i in range(2)]
    for pod in pods:
        pod.thread.start()
    kube_api.apply_file(KEDA_CRD)
    kube_api.apply_file(POOL_CRD)
    try:
        native = fleet_doc("native", replicas=2)
        native["spec"].update(server={"port": port}, autoscaling={
            "enabled": True, "mode": "native", "minReplicas": 1, "maxReplicas": 2,
            "scrapeIntervalSeconds": 1, "scaleDown": {"stabilizationWindowSeconds": 0}})
        cluster.apply(native)
        for i in range(2):
            kube_api.add_pod("default", f"native-{i}", {"scoring.fleet.dev/fleet": "native"},
                             pod_ip(i), port)
        hpa = fleet_doc("hpa", replicas=1)
        hpa["spec"]["autoscaling"] = {"enabled": True, "mode": "hpa", "minReplicas": 1, "maxReplicas": 3}
        cluster.apply(hpa)
        keda = fleet_doc("keda", replicas=1)
        keda["spec"]["autoscaling"] = {"enabled": True, "mode": "keda", "minReplicas": 1, "maxReplicas": 3,
                                       "keda": {"prometheusAddress": "http://prometheus.monitoring:9090"}}
        cluster.apply(keda)
        # native: two idle pods -> scaled to 1 through the scale subresource, with an Event, after
        # setting the pods' deletion costs (pods patch).
        wait_for(lambda: (cluster.deployment("native") or {}).get("spec", {}).get("replicas") == 1,
                 "the native fleet scaled down to one of its two idle pods", timeout_s=15)
        wait_for(lambda: cluster.get("autoscaling/v2", "HorizontalPodAutoscaler", "hpa"), "the HPA")
        cluster.patch_fleet("hpa", {"spec": {"autoscaling": {"enabled": False}}})  # HPA deleted
        wait_for(lambda: cluster.get("autoscaling/v2", "HorizontalPodAutoscaler", "hpa") is None,
                 "the HPA gone")
        wait_for(lambda: cluster.get("keda.sh/v1alpha1", "ScaledObject", "keda"), "the ScaledObject")
        cluster.patch_fleet("keda", {"spec": {"autoscaling": {"maxReplicas": 4}}})  # ScaledObject patched
        wait_for(lambda: cluster.get("keda.sh/v1alpha1", "ScaledObject", "keda")["spec"]["maxReplicaCount"] == 4,
                 "the ScaledObject re-specified")
        cluster.patch_fleet("keda", {"spec": {"autoscaling": {"mode": "native"}}})  # ScaledObject deleted
        wait_for(lambda: cluster.get("keda.sh/v1alpha1", "ScaledObject", "keda") is None, "the ScaledObject gone")
        cluster.kubectl("scale", "deployment", "hpa", "--replicas=5")  # drift, reverted
        wait_for(lambda: converged(cluster, "hpa", 1), "the drift reverted")
        # the gateway: its ServiceAccount, Role, RoleBinding, Deployment and Service, then removed
        gateway = fleet_doc("gw", replicas=1)
        gateway["spec"]["gateway"] = {"enabled": True}
        cluster.apply(gateway)
        wait_for(lambda: cluster.get("v1", "Service", "gw-gateway") and
                 cluster.get("rbac.authorization.k8s.io/v1", "RoleBinding", "gw-gateway"),
                 "the gateway's children")
        cluster.patch_fleet("gw", {"spec": {"gateway": {"enabled": False}}})
        wait_for(lambda: cluster.get("rbac.authorization.k8s.io/v1", "Role", "gw-gateway") is None
                 and cluster.get("apps/v1", "Deployment", "gw-gateway") is None, "the gateway gone")
        # the InferencePool: created, then deleted when disabled
        pool = fleet_doc("pool", replicas=1)
        pool["spec"]["inferencePool"] = {"enabled": True, "endpointPicker": {"name": "pool-epp"}}
        cluster.apply(pool)
        pool_api = "inference.networking.k8s.io/v1"
        wait_for(lambda: cluster.get(pool_api, "InferencePool", "pool"), "the InferencePool")
        cluster.patch_fleet("pool", {"spec": {"inferencePool": {"enabled": False}}})
        wait_for(lambda: cluster.get(pool_api, "InferencePool", "pool") is None, "the InferencePool gone")
        cluster.kubectl("delete", "sf", "native", "--wait=false")  # finalizer released
        wait_for(lambda: cluster.fleet("native") is None, "the native fleet gone")
    finally:
        for pod in pods:
            pod.stop()
    operator.assert_alive_without_traceback()

    used = {grant_of(r.method, r.path) for r in kube_api.requests(start)
            if not TEST_CLIENTS.match(r.user_agent)} - {None}
    granted = {(g, r, v) for (g, r), verbs in {**NAMESPACED_GRANTS, **CLUSTER_GRANTS}.items()
               for v in verbs}
    unused = sorted(granted - used)
    print(f"\noperator calls seen: {sorted(used)}\ngranted, not seen in this run: {unused}")
    assert used, "no operator request was logged"
    assert used <= granted, f"calls without a grant: {sorted(used - granted)}"
    # Least privilege: every grant is used, or named with the path that needs it.
    assert set(unused) <= set(GRANTED_FOR_PATHS_NOT_RUN), \
        f"grants nothing uses: {sorted(set(unused) - set(GRANTED_FOR_PATHS_NOT_RUN))}"
