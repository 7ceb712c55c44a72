"""The CRD's shape, and every example validated against its schema."""
from __future__ import annotations

import copy

import pytest

from fleet_operator.spec.fleet import parse_fleet
from tests.fleet_operator.crd_schema import CEL_MESSAGES, EXAMPLES, load_crd, load_yaml, schema_errors


def test_crd_names_scope_and_subresources():
    crd = load_crd()
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "scoringfleets.scoring.fleet.dev"
    assert (spec["group"], spec["scope"]) == ("scoring.fleet.dev", "Namespaced")
    assert spec["names"]["kind"] == "ScoringFleet"
    assert spec["names"]["plural"] == "scoringfleets"
    assert spec["names"]["shortNames"] == ["sf"]
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}, "scale": {
        "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector"}}


def test_crd_printer_columns():
    [version] = load_crd()["spec"]["versions"]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Replicas": ".status.replicas", "Ready": ".status.readyReplicas",
        "Desired": ".status.desiredReplicas", "Running": ".status.running",
        "Waiting": ".status.waiting", "Reason": ".status.lastDecision.reason",
        "Age": ".metadata.creationTimestamp",
    }


def test_crd_carries_the_cel_rules_the_tests_check_by_hand():
    # crd_schema.schema_errors repeats each rule in Python (no CEL here): the two must stay in step.
    [version] = load_crd()["spec"]["versions"]
    autoscaling = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["autoscaling"]
    rules = {r["message"]: r["rule"] for r in autoscaling["x-kubernetes-validations"]}
    assert set(rules) == set(CEL_MESSAGES)
    assert "self.minReplicas <= self.maxReplicas" in rules[CEL_MESSAGES[0]]
    assert "self.mode != 'keda' || " in rules[CEL_MESSAGES[1]] and "self.minReplicas >= 1" in rules[CEL_MESSAGES[1]]


def test_crd_carries_the_cel_rules_for_scale_to_zero_and_gateway_fleets():
    [version] = load_crd()["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    zero, fleets = spec["x-kubernetes-validations"]
    assert "self.autoscaling.minReplicas >= 1" in zero["rule"] and "self.autoscaling.mode == 'native'" in zero["rule"]
    assert "size(self.gateway.fleets) == 0" in fleets["rule"] and "self.gateway.enabled" in fleets["rule"]
    assert spec["properties"]["autoscaling"]["properties"]["minReplicas"]["minimum"] == 0


def _scale_to_zero(gateway: bool, mode: str = "native") -> dict:
    doc = _with("spec.autoscaling.minReplicas", 0)
    doc["spec"]["autoscaling"]["mode"] = mode
    doc["spec"]["gateway"] = {"enabled": gateway}
    return doc


# without a gateway of its own: another fleet's gateway may route to it (spec.gateway.fleets)
@pytest.mark.parametrize("gateway,mode,valid", [
    (True, "native", True), (False, "native", True), (True, "hpa", False),
], ids=["gateway-native", "no-gateway", "hpa-mode"])
def test_min_replicas_zero_needs_native_mode(gateway, mode, valid):
    errors = schema_errors(_scale_to_zero(gateway, mode))
    assert (errors == []) is valid, errors


@pytest.mark.parametrize("gateway,valid", [
    ({"enabled": True, "fleets": ["classifier", "reranker"]}, True),
    ({"enabled": False, "fleets": ["classifier"]}, False),
    ({"enabled": True, "fleets": ["Classifier"]}, False),
    ({"enabled": True, "fleets": ["a", "a"]}, False),
], ids=["listed", "without-the-gateway", "not-a-name", "repeated"])
def test_gateway_fleets_are_names_of_fleets_routed_by_this_gateway(gateway, valid):
    doc = _with("spec.gateway", gateway)
    errors = schema_errors(doc)
    assert (errors == []) is valid, errors


def test_there_are_three_examples():
    assert {p.name for p in EXAMPLES} >= {"minimal.yaml", "full.yaml", "cpu-only.yaml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_validates_against_the_schema(path):
    assert schema_errors(load_yaml(path)) == []


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_parses_into_a_fleet_spec(path):
    doc = load_yaml(path)
    fleet = parse_fleet(doc["metadata"]["name"], "default", doc["spec"])
    assert fleet.name == doc["metadata"]["name"]


def test_cpu_only_example_runs_the_default_model_in_float32_without_gpus():
    doc = load_yaml(next(p for p in EXAMPLES if p.name == "cpu-only.yaml"))
    fleet = parse_fleet("smollm-cpu", "default", doc["spec"])
    assert fleet.resources.gpus == 0
    assert fleet.model.dtype == "float32"
    assert fleet.model.source.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")


def _full():
    return load_yaml(next(p for p in EXAMPLES if p.name == "full.yaml"))


def _with(path: str, value):
    doc = copy.deepcopy(_full())
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node[key]
    node[last] = value
    return doc


@pytest.mark.parametrize("path,value,expected", [
    ("spec.model.dtype", "int8", "is not one of"),
    ("spec.replicas", -1, "less than the minimum"),
    ("spec.replicas", "3", "is not of type 'integer'"),
    ("spec.resources.gpus", -1, "less than the minimum"),
    ("spec.server.port", 70000, "greater than the maximum"),
    ("spec.autoscaling.mode", "prometheus-adapter", "is not one of"),
    ("spec.autoscaling.targetLoadPerReplica", 0, "less than or equal to the minimum"),
    ("spec.autoscaling.maxMissingFraction", 1.5, "greater than the maximum"),
    ("spec.autoscaling.scaleUp.selectPolicy", "Avg", "is not one of"),
    ("spec.autoscaling.scaleDown.policies", [], "non-empty"),
    ("spec.autoscaling.minReplicas", 9, "must be <= autoscaling.maxReplicas"),
    ("spec.autoscaling", {"mode": "keda", "minReplicas": 0}, "keda mode needs autoscaling.minReplicas >= 1"),
    ("spec.autoscaling.keda", {"prometheusAddress": "prometheus:9090"}, "does not match"),
    ("spec.autoscaling.keda", {"authenticationRef": ""}, "non-empty"),
    ("spec.autoscaling.keda", {"serverAddress": "http://p:9090"}, "Additional properties"),
    ("spec.model.source", "", "non-empty"),
    ("spec.unknownField", 1, "Additional properties"),
    ("spec.model.cache", {"emptyDir": {}, "hostPath": {"path": "/x"}}, "has too many properties"),
    ("spec.model.cache", {}, "should be non-empty"),
    ("spec.model.hfTokenSecretRef", {"name": "hf"}, "'key' is a required property"),
    ("spec.auth.apiKeySecretRef", {"name": "k", "key": ""}, "non-empty"),
    ("spec.server.startupTimeoutSeconds", 5, "less than the minimum"),
    ("spec.networkPolicy.enabled", "yes", "is not of type 'boolean'"),
    ("spec.networkPolicy.allowFrom", [{"ipBlock": {"except": ["10.0.0.0/8"]}}], "'cidr' is a required property"),
    ("spec.networkPolicy.gatewayAllowFrom", [{"namespaces": ["x"]}], "Additional properties"),
], ids=["dtype-enum", "replicas-min", "replicas-type", "gpus-min", "port-max", "mode-enum",
        "target-exclusive-min", "missing-fraction-max", "select-policy-enum", "policies-min-items",
        "cel-min-le-max", "cel-keda-min", "keda-address-pattern", "keda-auth-empty", "keda-unknown-field",
        "source-empty", "unknown-field", "cache-two-sources", "cache-no-source", "token-ref-without-key",
        "api-key-ref-empty-key", "startup-timeout-min", "network-policy-enabled-type", "peer-without-cidr",
        "gateway-peer-unknown-field"])
def test_schema_rejects(path, value, expected):
    errors = schema_errors(_with(path, value))
    assert any(expected in e for e in errors), errors


@pytest.mark.parametrize("field,value,valid", [
    ("aliases", ["qwen3", "org/qwen3"], True),
    ("aliases", ["a,b"], False),
    ("aliases", ["x", "x"], False),
    ("loraAdapters", [{"name": "sql", "path": "/cache/adapters/sql"}], True),
    ("loraAdapters", [{"name": "base:sql", "path": "/a"}], False),
    ("loraAdapters", [{"name": "sql"}], False),
], ids=["aliases", "alias-comma", "alias-repeated", "adapter", "adapter-colon", "adapter-no-path"])
def test_model_aliases_and_lora_adapters(field, value, valid):
    doc = _full()
    doc["spec"]["model"][field] = value
    errors = schema_errors(doc)
    assert (errors == []) is valid, errors
