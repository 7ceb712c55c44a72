"""builders/gateway.py and gateway_rbac.py: the gateway's five children, field by field, valid
against Kubernetes' JSON schema, and never taken for scoring pods by anything that selects those."""
from __future__ import annotations

import dataclasses

import kubernetes_validate
import pytest

from fleet_operator.builders import build_children, gateway_address, unwanted_children
from fleet_operator.builders.deployment import build_deployment
from fleet_operator.builders.gateway import (
    build_gateway_deployment,
    build_gateway_service,
    gateway_args,
)
from fleet_operator.builders.gateway_rbac import (
    build_gateway_role,
    build_gateway_role_binding,
    build_gateway_service_account,
)
from fleet_operator.context import OperatorConfig
from fleet_operator.spec import crd
from fleet_operator.spec.fleet import SpecError, parse_fleet
from gateway.config import POLICIES, parse_args  # the operator never imports the gateway; a test may
from tests.fleet_operator.test_builders import IMAGE, K8S_VERSION

FLEET_LABEL = "scoring.fleet.dev/fleet"
GATEWAY_LABEL = "scoring.fleet.dev/gateway"
GATEWAY_KINDS = ["ServiceAccount", "Role", "RoleBinding", "Deployment", "Service"]


def fleet(gateway=None, **spec):
    return parse_fleet("qwen", "team-a", {"model": {"source": "Qwen/Qwen3-0.6B"}, "image": IMAGE,
                                          "gateway": {"enabled": True, **(gateway or {})}, **spec})


def pod_template(fleet_spec):
    return build_gateway_deployment(fleet_spec)["spec"]["template"]


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_children_with_the_gateway_add_its_five_after_the_fleets_own():
    children = build_children(fleet())
    assert [c["kind"] for c in children][-5:] == GATEWAY_KINDS
    assert {c["metadata"]["name"] for c in children[-5:]} == {"qwen-gateway"}
    # only the mode children (a native fleet has neither an HPA nor a ScaledObject) and the InferencePool
    # (off by default), none of the gateway's
    assert [kind for _, kind, _ in unwanted_children(fleet())] == ["HorizontalPodAutoscaler", "ScaledObject",
                                                                   "InferencePool"]


def test_a_fleet_without_the_gateway_must_not_have_its_children():
    plain = fleet({"enabled": False})
    assert [c["kind"] for c in build_children(plain)] == \
        ["NetworkPolicy", "Deployment", "Service", "PodDisruptionBudget"]
    # its NetworkPolicy last, once the pods it guards are gone
    assert [(kind, name) for _, kind, name in unwanted_children(plain)][2:-1] == \
        [(kind, "qwen-gateway") for kind in ["Deployment", "Service", "RoleBinding", "Role", "ServiceAccount",
                                             "NetworkPolicy"]]


def test_the_gateway_pods_are_not_the_fleets_pods():
    f = fleet()
    gateway_pod_labels = pod_template(f)["metadata"]["labels"]
    # the fleet label marks scoring pods for the monitors and recording rules: never on a gateway
    assert FLEET_LABEL not in gateway_pod_labels
    assert gateway_pod_labels[GATEWAY_LABEL] == "qwen"
    assert gateway_pod_labels["app.kubernetes.io/component"] == "gateway"
    own = {c["kind"]: c for c in build_children(f) if c["metadata"]["name"] == "qwen"}
    fleet_deployment, fleet_service, pdb = own["Deployment"], own["Service"], own["PodDisruptionBudget"]
    for selector in (fleet_deployment["spec"]["selector"]["matchLabels"],
                     fleet_service["spec"]["selector"], pdb["spec"]["selector"]["matchLabels"],
                     own["NetworkPolicy"]["spec"]["podSelector"]["matchLabels"]):
        assert not selects(selector, gateway_pod_labels)
    scoring_pod_labels = fleet_deployment["spec"]["template"]["metadata"]["labels"]
    for selector in (build_gateway_deployment(f)["spec"]["selector"]["matchLabels"],
                     build_gateway_service(f)["spec"]["selector"]):
        assert selects(selector, gateway_pod_labels) and not selects(selector, scoring_pod_labels)


@pytest.mark.parametrize("gateway,expected", [({}, "300"), ({"queueTimeoutSeconds": 600}, "600")],
                         ids=["default", "set"])
def test_the_gateway_holds_requests_for_the_fleets_queue_timeout(gateway, expected):
    # the default covers a wake from zero on a GPU (a pod scheduled, the image pulled, the model
    # loaded), which the gateway's own 30 s default does not
    args = pod_template(fleet(gateway))["spec"]["containers"][0]["args"]
    assert args[args.index("--queue-timeout") + 1] == expected


@pytest.mark.parametrize("value", [0, -5, 2.5, "300"])
def test_a_queue_timeout_that_is_not_a_positive_integer_is_a_spec_error(value):
    with pytest.raises(SpecError, match=r"spec\.gateway\.queueTimeoutSeconds"):
        fleet({"queueTimeoutSeconds": value})


@pytest.mark.parametrize("gateway,expected", [({}, "cache_aware"), ({"policy": "power_of_two"}, "power_of_two"),
                                              ({"policy": "round_robin"}, "round_robin")],
                         ids=["default", "power-of-two", "round-robin"])
def test_the_gateway_picks_pods_by_the_fleets_policy(gateway, expected):
    args = pod_template(fleet(gateway))["spec"]["containers"][0]["args"]
    assert args[args.index("--policy") + 1] == expected


@pytest.mark.parametrize("value", ["random", "", 3, None])
def test_a_policy_the_gateway_does_not_have_is_a_spec_error(value):
    with pytest.raises(SpecError, match=r"spec\.gateway\.policy must be one of cache_aware, power_of_two"):
        fleet({"policy": value})


def test_every_policy_of_the_crd_is_one_the_gateway_takes():
    assert set(crd.spec_schema("gateway", "policy")["enum"]) == set(POLICIES)


def test_the_gateway_container_discovers_this_fleet_and_listens_on_its_port():
    [c] = pod_template(fleet({"port": 8080}))["spec"]["containers"]
    assert c["command"] == ["python", "-m", "gateway"]
    assert c["args"] == gateway_args(fleet({"port": 8080})) == [
        "--fleet", "qwen", "--namespace", "team-a", "--host", "0.0.0.0", "--port", "8080",
        "--queue-timeout", "300", "--policy", "cache_aware", "--fleet-model", "qwen=qwen"]
    assert c["image"] == IMAGE and c["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    # readiness on /health: at zero pods the gateway must still take requests, to hold them
    assert c["readinessProbe"]["httpGet"] == c["livenessProbe"]["httpGet"] == {"path": "/health",
                                                                               "port": "http"}
    assert c["resources"] == {"requests": {"cpu": "1", "memory": "512Mi"},
                              "limits": {"cpu": "1", "memory": "512Mi"}}


def test_a_gateway_for_several_fleets_names_each_with_the_model_it_serves_where_known():
    front = dataclasses.replace(fleet({"fleets": ["classifier", "reranker"]}, model={
        "source": "Qwen/Qwen3-0.6B", "name": "scorer"}))
    front = dataclasses.replace(front, gateway=dataclasses.replace(
        front.gateway, fleet_models={"classifier": ("bge-classifier",)}))  # reranker: not found
    assert gateway_args(front)[-8:] == ["--fleet-model", "qwen=scorer", "--fleet", "classifier",
                                        "--fleet-model", "classifier=bge-classifier", "--fleet", "reranker"]
    labels = pod_template(front)["metadata"]["labels"]
    assert {k: v for k, v in labels.items() if k.startswith("serves.")} == {
        "serves.scoring.fleet.dev/qwen": "true", "serves.scoring.fleet.dev/classifier": "true",
        "serves.scoring.fleet.dev/reranker": "true"}
    # the Deployment's selector is its own gateway's, whatever it routes to (a selector is immutable)
    assert build_gateway_deployment(front)["spec"]["selector"]["matchLabels"] == {GATEWAY_LABEL: "qwen"}


def test_the_gateway_takes_the_args_the_operator_writes():
    # the gateway's own parser (a wrong flag would crash-loop the pod: exit 2)
    front = fleet({"fleets": ["classifier", "reranker"]})
    front = dataclasses.replace(front, gateway=dataclasses.replace(
        front.gateway, fleet_models={"classifier": ("bge-classifier",)}))
    config, _ = parse_args(gateway_args(front), environ={})
    assert [(f.name, f.urls, f.models) for f in config.fleets] == [
        ("qwen", None, ("qwen",)), ("classifier", None, ("bge-classifier",)), ("reranker", None, ())]


@pytest.mark.parametrize(("gateway_image", "operator_image", "expected"), [
    (None, None, IMAGE),
    (None, "control:1", "control:1"),
    ("mine:2", "control:1", "mine:2"),
    ("mine:2", None, "mine:2"),
], ids=["fleet-image", "operator-control-image", "fleet-override", "fleet-override-alone"])
def test_the_gateway_image_is_the_fleets_choice_then_the_operators_then_the_fleet_image(
        gateway_image, operator_image, expected):
    # the control image has the gateway but no torch: a gateway pod that must start for a fleet to
    # wake from zero pulls a few hundred MB, not the server's GBs
    spec = {"model": {"source": "Qwen/Qwen3-0.6B"}, "image": IMAGE,
            "gateway": {"enabled": True, **({"image": gateway_image} if gateway_image else {})}}
    f = parse_fleet("qwen", "team-a", spec, OperatorConfig(gateway_image=operator_image))
    [c] = pod_template(f)["spec"]["containers"]
    assert c["image"] == expected
    [server] = build_deployment(f)["spec"]["template"]["spec"]["containers"]
    assert server["image"] == IMAGE  # the scoring pods keep the server image


def test_the_gateway_pods_are_scraped_and_run_as_its_service_account():
    template = pod_template(fleet({"port": 8080, "replicas": 2}))
    assert template["metadata"]["annotations"] == {"prometheus.io/scrape": "true",
                                                   "prometheus.io/port": "8080",
                                                   "prometheus.io/path": "/metrics"}
    assert template["spec"]["serviceAccountName"] == "qwen-gateway"
    assert build_gateway_deployment(fleet({"replicas": 2}))["spec"]["replicas"] == 2
    assert build_gateway_service(fleet({"port": 8080}))["spec"]["ports"] == [
        {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]


def test_the_gateway_pods_run_under_the_servers_security_contexts():
    f = fleet()
    gateway_pod = pod_template(f)["spec"]
    server_pod = build_deployment(f)["spec"]["template"]["spec"]
    assert gateway_pod["securityContext"] == server_pod["securityContext"]
    assert gateway_pod["containers"][0]["securityContext"] == server_pod["containers"][0]["securityContext"]
    assert gateway_pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    # fresh dicts per object: editing one child's context leaves the other's alone
    assert gateway_pod["securityContext"] is not server_pod["securityContext"]


def test_the_gateway_may_only_read_pods_in_its_namespace():
    f = fleet()
    role, binding = build_gateway_role(f), build_gateway_role_binding(f)
    assert role["metadata"]["namespace"] == "team-a"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "qwen-gateway"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "qwen-gateway",
                                    "namespace": "team-a"}]
    assert build_gateway_service_account(f)["metadata"]["name"] == "qwen-gateway"


def test_gateway_address_is_the_services_cluster_dns_name():
    assert gateway_address(fleet({"port": 8080})) == "http://qwen-gateway.team-a.svc:8080"


@pytest.mark.parametrize("build", [build_gateway_deployment, build_gateway_service,
                                   build_gateway_service_account, build_gateway_role,
                                   build_gateway_role_binding],
                         ids=lambda b: b.__name__.removeprefix("build_gateway_"))
def test_gateway_children_are_valid_kubernetes_objects(build):
    kubernetes_validate.validate(build(fleet()), K8S_VERSION, strict=True)
