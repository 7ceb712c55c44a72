"""spec.inferencePool and builders/inference_pool.py: the InferencePool validated against the Gateway API
Inference Extension's published v1 CRD (tests/vendor/inference-extension, v1.6.0), selecting exactly the
fleet's scoring pods (as built, across a rollout; never the gateway's), the spec's checks, the
InferencePoolReady condition, and the NetworkPolicy admitting the named Inference Gateway namespaces."""
from __future__ import annotations

import hashlib

import jsonschema
import pytest
import yaml

from fleet_operator.builders import build_children, build_deployment, unwanted_children
from fleet_operator.builders.gateway import build_gateway_deployment
from fleet_operator.builders.inference_pool import build_inference_pool
from fleet_operator.context import OperatorConfig
from fleet_operator.spec.fleet import SpecError, parse_fleet
from fleet_operator.status.reconciler import inference_pool_condition
from tests.fleet_operator.crd_schema import ROOT, schema_errors, to_json_schema
from tests.fleet_operator.test_network_policy import NEIGHBOUR, SCORING, Pod, admits, selects

POOL_CRD = ROOT / "tests" / "vendor" / "inference-extension" / "inference.networking.k8s.io_inferencepools.yaml"
POOL_CRD_SHA256 = "55e0dbf39c50c4bbdd60106493a4573df4bb44479f9ce46762f1af718883e5cd"
EPP = {"name": "qwen-epp"}


def fleet(pool=None, **spec):
    return parse_fleet("qwen", "team-a", {"model": {"source": "m"}, "image": "img:1",
                                          "inferencePool": {"enabled": True, "endpointPicker": EPP,
                                                            **(pool or {})}, **spec},
                       OperatorConfig(namespace="scoring-system"))


@pytest.fixture(scope="module")
def pool_validator() -> jsonschema.Draft4Validator:
    crd = yaml.safe_load(POOL_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft4Validator(to_json_schema(version["schema"]["openAPIV3Schema"]))


def pool_errors(validator, obj) -> list[str]:
    """The schema's errors, and its two CEL rules checked by hand (no API server here)."""
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(obj)]
    ref = obj["spec"].get("endpointPickerRef") or {}
    if ref and ref.get("kind", "Service") == "Service" and "port" not in ref:
        errors.append("spec.endpointPickerRef: port is required when kind is 'Service'")
    numbers = [p["number"] for p in obj["spec"]["targetPorts"]]
    if len(set(numbers)) != len(numbers):
        errors.append("spec.targetPorts: port number must be unique")
    return errors


def test_vendored_crd_is_the_v1_6_0_release_unchanged():
    assert hashlib.sha256(POOL_CRD.read_bytes()).hexdigest() == POOL_CRD_SHA256
    crd = yaml.safe_load(POOL_CRD.read_text())
    assert crd["metadata"]["annotations"]["inference.networking.k8s.io/bundle-version"] == "v1.6.0"


@pytest.mark.parametrize("pool,server", [
    ({}, {}),
    ({"endpointPicker": {"name": "epp", "port": 9100, "failureMode": "FailOpen"}}, {"port": 8080}),
], ids=["defaults", "every-field"])
def test_the_pool_validates_against_the_published_v1_schema(pool_validator, pool, server):
    obj = build_inference_pool(fleet(pool, server=server))
    assert pool_errors(pool_validator, obj) == []
    assert obj["apiVersion"] == "inference.networking.k8s.io/v1" and obj["kind"] == "InferencePool"


def test_the_validator_refuses_what_the_api_server_would(pool_validator):
    obj = build_inference_pool(fleet())
    del obj["spec"]["endpointPickerRef"]["port"]
    obj["spec"]["targetPorts"] = [{"number": 70000}]
    errors = pool_errors(pool_validator, obj)
    assert any("targetPorts.0.number" in e for e in errors) and any("port is required" in e for e in errors)


def test_the_pool_points_at_the_servers_port_and_the_named_picker():
    spec = build_inference_pool(fleet({"endpointPicker": {"name": "epp", "port": 9100}}, server={"port": 8080}))["spec"]
    assert spec["targetPorts"] == [{"number": 8080}]
    assert spec["endpointPickerRef"] == {"group": "", "kind": "Service", "name": "epp",
                                         "port": {"number": 9100}, "failureMode": "FailClose"}


def test_the_selector_takes_the_scoring_pods_across_a_rollout_and_never_the_gateways():
    f = fleet(gateway={"enabled": True})
    selector = build_inference_pool(f)["spec"]["selector"]
    pod_labels = build_deployment(f)["spec"]["template"]["metadata"]["labels"]
    assert selects(selector, pod_labels)
    # a new ReplicaSet's pods differ only by pod-template-hash; the selector does not name it
    assert selects(selector, {**pod_labels, "pod-template-hash": "7d9f8c"})
    assert not selects(selector, build_gateway_deployment(f)["spec"]["template"]["metadata"]["labels"])
    assert selector["matchLabels"] == build_deployment(f)["spec"]["selector"]["matchLabels"]


def test_scoring_pods_carry_the_engine_type_the_picker_reads():
    labels = build_deployment(fleet())["spec"]["template"]["metadata"]["labels"]
    assert labels["llm-d.ai/engine-type"] == "sglang"
    assert "llm-d.ai/engine-type" not in build_deployment(fleet())["spec"]["selector"]["matchLabels"]


def test_the_pool_is_a_child_only_while_enabled():
    kinds = [c["kind"] for c in build_children(fleet())]
    assert kinds.count("InferencePool") == 1
    assert ("inference.networking.k8s.io/v1", "InferencePool", "qwen") not in unwanted_children(fleet())
    off = fleet({"enabled": False})
    assert "InferencePool" not in [c["kind"] for c in build_children(off)]
    assert ("inference.networking.k8s.io/v1", "InferencePool", "qwen") in unwanted_children(off)
    plain = parse_fleet("qwen", "team-a", {"model": {"source": "m"}, "image": "img:1"})
    assert not plain.inference_pool.enabled  # off by default


@pytest.mark.parametrize("pool,message", [
    ({"endpointPicker": {}}, "spec.inferencePool.enabled needs spec.inferencePool.endpointPicker.name"),
    ({"endpointPicker": {"name": "EPP_1"}}, "must be a Service name"),
    ({"endpointPicker": {"name": "epp", "failureMode": "Sometimes"}}, "must be one of FailClose, FailOpen"),
    ({"endpointPicker": {"name": "epp", "port": 0}}, "spec.inferencePool.endpointPicker.port"),
    ({"allowFromNamespaces": ["Gateway NS"]}, "allowFromNamespaces[0] must be a namespace name"),
    ({"allowFromNamespaces": "istio-system"}, "must be a list of namespace names"),
], ids=["no-picker", "bad-picker-name", "bad-failure-mode", "port-0", "bad-namespace", "not-a-list"])
def test_the_parser_refuses_a_pool_it_could_not_build(pool, message):
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        fleet(pool)


def test_the_crd_refuses_an_enabled_pool_without_a_picker_as_the_parser_does():
    doc = {"apiVersion": "scoring.fleet.dev/v1alpha1", "kind": "ScoringFleet", "metadata": {"name": "q"},
           "spec": {"model": {"source": "m"}, "inferencePool": {"enabled": True}}}
    assert any("inferencePool.enabled needs endpointPicker.name" in e for e in schema_errors(doc))
    doc["spec"]["inferencePool"]["endpointPicker"] = EPP
    assert schema_errors(doc) == []


def test_inference_pool_ready_once_applied():
    # Its CRD missing (a 404 on create): tests/fleet_operator/test_inference_pool_e2e.py.
    status, reason, message = inference_pool_condition(build_inference_pool(fleet()))
    assert (status, reason) == ("True", "InferencePoolApplied") and "selects the fleet's pods" in message


GATEWAY_DATA_PLANE = Pod("istio-system", {"app": "istio-ingressgateway"})
EPP_ELSEWHERE = Pod("inference", {"app": "qwen-epp"})


@pytest.mark.parametrize("source,admitted", [
    (GATEWAY_DATA_PLANE, True), (EPP_ELSEWHERE, True), (NEIGHBOUR, False),
    (Pod("kube-system", {"app": "istio-ingressgateway"}), False),
], ids=["gateway-namespace", "epp-namespace", "neighbour", "unnamed-namespace"])
def test_the_network_policy_admits_the_named_inference_gateway_namespaces(source, admitted):
    f = fleet({"allowFromNamespaces": ["istio-system", "inference"]})
    policies = [c for c in build_children(f) if c["kind"] == "NetworkPolicy"]
    assert admits(policies, SCORING, f.server.port, source) is admitted
    # not on another port, and not once the pool is disabled
    assert not admits(policies, SCORING, f.server.port + 1, GATEWAY_DATA_PLANE)
    off = fleet({"enabled": False, "allowFromNamespaces": ["istio-system"]})
    off_policies = [c for c in build_children(off) if c["kind"] == "NetworkPolicy"]
    assert not admits(off_policies, SCORING, off.server.port, GATEWAY_DATA_PLANE)
