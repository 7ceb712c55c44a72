"""A real `helm install` (the Helm library, helm-sdkpy) into the Kubernetes API emulator.

The install's manifest is exactly what `helm template` prints, so it is also how the chart is rendered
for the checks below: the CRD's single source, security contexts, flags, monitors, uninstall.
"""
from __future__ import annotations

import copy

import pytest
import yaml

from tests.packaging.helm_tool import CHART, by_kind
from tools import sync_crd

RELEASE_NS = "scoring-system"


def test_install_creates_the_operator_account_rbac_and_a_served_crd(render, api_get):
    render({})
    fullname = "sf-scoring-fleet"
    deployment = api_get(f"/apis/apps/v1/namespaces/{RELEASE_NS}/deployments/{fullname}")
    assert api_get(f"/api/v1/namespaces/{RELEASE_NS}/serviceaccounts/{fullname}")
    assert api_get(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{fullname}")
    assert api_get(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{fullname}")
    crd = api_get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                  "scoringfleets.scoring.fleet.dev")
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # Helm's CRD is registered: the API now serves ScoringFleets (kubectl and kopf can use them).
    discovery = api_get("/apis/scoring.fleet.dev/v1alpha1")
    assert "scoringfleets" in {r["name"] for r in discovery["resources"]}
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "-m", "fleet_operator"]
    assert {"--standalone", "--all-namespaces",
            "--liveness=http://0.0.0.0:8080/healthz"} <= set(container["args"])


@pytest.mark.parametrize(
    ("crds", "has_crd", "keep"),
    [
        ({"install": True, "keep": True}, True, True),
        ({"install": True, "keep": False}, True, False),
        ({"install": False, "keep": True}, False, False),
    ],
    ids=["install-keep", "install-no-keep", "no-install"],
)
def test_chart_crd_is_crds_source_plus_labels_and_keep(render, crds, has_crd, keep):
    objects = render({"crds": crds})
    rendered = by_kind(objects, "CustomResourceDefinition")
    assert len(rendered) == int(has_crd)
    if not has_crd:
        return
    source = yaml.safe_load(sync_crd.SOURCE.read_text())
    (crd,) = rendered
    assert crd["spec"] == source["spec"] and crd["metadata"]["name"] == source["metadata"]["name"]
    annotations = crd["metadata"].get("annotations") or {}
    assert (annotations.get("helm.sh/resource-policy") == "keep") is keep
    assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


def test_operator_pod_meets_the_restricted_pod_security_standard(render):
    (deployment,) = by_kind(render({}), "Deployment")
    assert deployment["spec"]["replicas"] == 1  # kopf standalone: one operator, never two
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    security = {**pod["securityContext"], **container["securityContext"]}
    assert security["runAsNonRoot"] is True and security["runAsUser"] == 65532
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["resources"]["limits"] and container["resources"]["requests"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {"name": "health", "containerPort": 8080, "protocol": "TCP"} in container["ports"]


def test_watched_namespaces_become_operator_flags(render):
    objects = render({"watchNamespaces": ["team-a", "team-b"]}, namespaces=["team-a", "team-b"])
    (container,) = by_kind(objects, "Deployment")[0]["spec"]["template"]["spec"]["containers"]
    assert "--all-namespaces" not in container["args"]
    assert [a for a in container["args"] if a.startswith("--namespace")] == [
        "--namespace=team-a", "--namespace=team-b"]


@pytest.mark.parametrize("address", ["", "http://prometheus-operated.monitoring.svc:9090"],
                         ids=["unset", "set"])
def test_keda_prometheus_address_reaches_the_operators_environment(render, address):
    (deployment,) = by_kind(render({"keda": {"prometheusAddress": address}}), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {var["name"]: var.get("value") for var in container["env"]}
    assert env.get("SCORINGFLEET_PROMETHEUS_ADDRESS") == (address or None)


def test_the_operator_knows_its_namespace_from_the_downward_api(render):
    # the fleets' NetworkPolicies admit the operator's namespace (its scrape of the pods)
    (deployment,) = by_kind(render({}), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {var["name"]: var for var in container["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


MONITORS_ON = {"monitoring": {"podMonitor": {"enabled": True},
                              "serviceMonitor": {"enabled": True}}}


def test_monitors_are_skipped_with_a_warning_when_the_monitoring_api_is_absent(render_release):
    release = render_release(MONITORS_ON)
    kinds = {obj["kind"] for obj in release.objects}
    assert kinds.isdisjoint({"PodMonitor", "ServiceMonitor"})
    assert "does not serve monitoring.coreos.com/v1" in release.notes


def test_monitors_render_when_the_monitoring_api_is_served(render, api_create):
    for kind in ("PodMonitor", "ServiceMonitor"):
        api_create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", _monitoring_crd(kind))
    objects = render(copy.deepcopy(MONITORS_ON))
    (pod_monitor,) = by_kind(objects, "PodMonitor")
    (service_monitor,) = by_kind(objects, "ServiceMonitor")
    fleet_pods = {"matchExpressions": [{"key": "scoring.fleet.dev/fleet", "operator": "Exists"}]}
    assert pod_monitor["spec"]["selector"] == fleet_pods == service_monitor["spec"]["selector"]
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] == "http"
    assert pod_monitor["spec"]["namespaceSelector"] == {"any": True}


def _monitoring_crd(kind: str) -> dict:
    """A minimal stand-in for the Prometheus Operator's CRD: enough for the API to serve the kind."""
    plural = kind.lower() + "s"
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com"},
            "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                               "listKind": kind + "List"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {
                                       "type": "object",
                                       "x-kubernetes-preserve-unknown-fields": True}}}]}}


def test_sample_fleet_is_a_post_install_hook_with_the_chart_image(render_release, api_get):
    release = render_release({"sampleFleet": {"enabled": True}})
    (fleet,) = by_kind(release.objects, "ScoringFleet")
    assert fleet["spec"]["image"] == "scoring-fleet:0.1.0"
    assert fleet["metadata"]["namespace"] == RELEASE_NS
    # A post-install hook: Helm maps a kind only once its CRD exists, so the CR must come after it.
    assert "post-install" in fleet["metadata"]["annotations"]["helm.sh/hook"]
    # The operator and the CRD were created before the hook in any case.
    assert api_get(f"/apis/apps/v1/namespaces/{RELEASE_NS}/deployments/sf-scoring-fleet")
    if release.hooks_ran:  # only where the API serves OpenAPI (a real cluster), see OPENAPI_GAP
        assert api_get(f"/apis/scoring.fleet.dev/v1alpha1/namespaces/{RELEASE_NS}/scoringfleets/"
                       "smollm2-scorer")


def test_helm_refuses_values_outside_the_schema(helm, kube_api):
    (result,) = helm.run([{"action": "install", "release": "sf", "namespace": "default",
                           "chart": str(CHART),
                           "values": {"operator": {"logLevel": "loud"}}}],
                         kubeconfig=str(kube_api.kubeconfig))
    assert not result["ok"]
    assert "logLevel" in result["error"]


def test_uninstall_removes_the_operator_but_keeps_the_crd(helm, kube_api, api_get):
    chart = str(CHART)
    results = helm.run([
        {"action": "install", "release": "sf", "namespace": "default", "chart": chart},
        {"action": "uninstall", "release": "sf", "namespace": "default"},
    ], kubeconfig=str(kube_api.kubeconfig))
    assert [r["ok"] for r in results] == [True, True], results
    assert api_get("/apis/apps/v1/namespaces/default/deployments/sf-scoring-fleet") is None
    assert api_get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                   "scoringfleets.scoring.fleet.dev")


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ({}, "scoring-fleet-control:0.1.0"),
        ({"repository": "registry.example/sfc", "tag": "1.2.3"}, "registry.example/sfc:1.2.3"),
        ({"digest": "sha256:" + "a" * 64}, "scoring-fleet-control@sha256:" + "a" * 64),
    ],
    ids=["app-version", "tag", "digest-wins"],
)
def test_operator_image_reference(render, image, expected):
    # the operator runs from the control image (no torch)
    (deployment,) = by_kind(render({"controlImage": image}), "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == expected


def test_fleets_get_the_server_image_and_their_gateways_the_control_image(render):
    (deployment,) = by_kind(render({"image": {"repository": "reg.example/sf", "tag": "2"},
                                    "controlImage": {"repository": "reg.example/sf-control", "tag": "3"}}),
                            "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {var["name"]: var.get("value") for var in container["env"]}
    assert container["image"] == "reg.example/sf-control:3"
    assert env["SCORINGFLEET_DEFAULT_IMAGE"] == "reg.example/sf:2"
    assert env["SCORINGFLEET_GATEWAY_IMAGE"] == "reg.example/sf-control:3"


def test_network_policy_admits_only_the_liveness_port_to_the_operator(render):
    objects = render({})
    (policy,) = by_kind(objects, "NetworkPolicy")
    (deployment,) = by_kind(objects, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"ports": [{"port": "health", "protocol": "TCP"}]}]


def test_network_policy_can_be_turned_off(render):
    objects = render({"networkPolicy": {"enabled": False}})
    assert by_kind(objects, "NetworkPolicy") == [] and by_kind(objects, "Deployment")
