"""fleet_operator/builders/scaled_object.py: the ScaledObject builder, validated against KEDA's published CRD schema
(tests/vendor/keda, v2.20.2) and, for the HPA behavior it carries, the Kubernetes schema."""
from __future__ import annotations

import ast
import hashlib
import math
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from fleet_operator.builders import build_children, build_hpa, scaled_object as keda, wants_scaled_object
from fleet_operator.builders.hpa import hpa_behavior
from fleet_operator.builders.scaled_object import ScaledObjectParams, build_scaled_object, scaled_object_params
from fleet_operator.context import OperatorConfig
from fleet_operator.names import fleet_labels
from fleet_operator.spec.fleet import parse_fleet
from tests.fleet_operator.crd_schema import to_json_schema

ROOT = Path(__file__).resolve().parents[2]
KEDA_CRD = ROOT / "tests" / "vendor" / "keda" / "keda.sh_scaledobjects.yaml"
KEDA_CRD_SHA256 = "af35555862a83933b074af14ad439c4b4ceabaf4daa3e9338e9b23e36d308d80"
RULES = ROOT / "charts" / "scoring-fleet" / "files" / "prometheus-rules.yaml"
PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"

MINIMAL = {"name": "qwen-scorer", "namespace": "team-a", "min_replicas": 1, "max_replicas": 8,
           "target_load_per_replica": 32, "prometheus_address": PROMETHEUS}
# The spec's default behavior, as builders renders it for an HPA.
BEHAVIOR = {
    "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                             {"type": "Percent", "value": 100, "periodSeconds": 15}]},
    "scaleDown": {"stabilizationWindowSeconds": 300, "selectPolicy": "Max",
                  "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]},
}
FULL = {**MINIMAL, "min_replicas": 2, "target_load_per_replica": 12.5, "behavior": BEHAVIOR,
        "fallback_failures": 5, "authentication_ref": "prometheus-creds",
        "labels": {"scoring.fleet.dev/fleet": "qwen-scorer", "app.kubernetes.io/part-of": "x"}}


@pytest.fixture(scope="module")
def crd_validator() -> jsonschema.Draft4Validator:
    crd = yaml.safe_load(KEDA_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return jsonschema.Draft4Validator(to_json_schema(version["schema"]["openAPIV3Schema"]))


def _errors(validator: jsonschema.Draft4Validator, obj: dict) -> list[str]:
    return [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(obj)]


def test_vendored_crd_is_keda_v2_20_2_unchanged():
    assert hashlib.sha256(KEDA_CRD.read_bytes()).hexdigest() == KEDA_CRD_SHA256


@pytest.mark.parametrize("params", [MINIMAL, FULL], ids=["minimal", "full"])
def test_scaled_object_validates_against_kedas_crd(crd_validator, params):
    obj = build_scaled_object(ScaledObjectParams(**params))
    assert _errors(crd_validator, obj) == []


def test_minimal_scaled_object_targets_the_fleets_scale_subresource():
    obj = build_scaled_object(ScaledObjectParams(**MINIMAL))
    assert obj["apiVersion"] == "keda.sh/v1alpha1" and obj["kind"] == "ScaledObject"
    assert obj["metadata"] == {"name": "qwen-scorer", "namespace": "team-a", "labels": {}}
    spec = obj["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "scoring.fleet.dev/v1alpha1",
                                      "kind": "ScoringFleet", "name": "qwen-scorer"}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 8)
    assert spec["fallback"] == {"failureThreshold": 3, "replicas": 1,
                                "behavior": "currentReplicasIfHigher"}
    assert "advanced" not in spec  # no behavior given: the HPA's defaults
    assert spec["triggers"] == [{
        "type": "prometheus", "name": "fleet-load", "metricType": "AverageValue",
        "metadata": {"serverAddress": PROMETHEUS,
                     "query": 'scoringfleet:load:sum{namespace="team-a",fleet="qwen-scorer"}',
                     "threshold": "32", "ignoreNullValues": "false"}}]


def test_full_scaled_object_carries_behavior_auth_fallback_and_labels():
    obj = build_scaled_object(ScaledObjectParams(**FULL))
    spec = obj["spec"]
    assert spec["advanced"] == {"horizontalPodAutoscalerConfig": {"behavior": BEHAVIOR}}
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] is not BEHAVIOR
    assert spec["fallback"] == {"failureThreshold": 5, "replicas": 2,
                                "behavior": "currentReplicasIfHigher"}
    (trigger,) = spec["triggers"]
    assert trigger["authenticationRef"] == {"name": "prometheus-creds",
                                            "kind": "TriggerAuthentication"}
    assert trigger["metadata"]["threshold"] == "12.5"
    assert obj["metadata"]["labels"] == FULL["labels"]


@pytest.mark.parametrize("version", ["1.25.0", "1.37.0"])
def test_behavior_is_a_valid_hpa_behavior(version):
    behavior = build_scaled_object(ScaledObjectParams(**FULL))["spec"]["advanced"][
        "horizontalPodAutoscalerConfig"]["behavior"]
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "x", "namespace": "team-a"},
           "spec": {"scaleTargetRef": {"apiVersion": "scoring.fleet.dev/v1alpha1",
                                       "kind": "ScoringFleet", "name": "x"},
                    "minReplicas": 1, "maxReplicas": 8, "behavior": behavior}}
    kubernetes_validate.validate(hpa, version, strict=True)


@pytest.mark.parametrize("mutate, where", [
    (lambda spec: spec.update(minReplicas=spec.pop("minReplicaCount")), "spec"),
    (lambda spec: spec["triggers"][0]["metadata"].update(ignoreNullValues=False), "metadata"),
    (lambda spec: spec["fallback"].update(behavior="keep"), "behavior"),
    (lambda spec: spec["fallback"].pop("replicas"), "fallback"),
], ids=["misnamed-field", "bool-metadata", "unknown-fallback-behavior", "fallback-without-replicas"])
def test_crd_schema_catches_what_the_builder_must_not_do(crd_validator, mutate, where):
    """The validation above is not vacuous: each of these would be pruned or rejected by the API."""
    obj = build_scaled_object(ScaledObjectParams(**MINIMAL))
    mutate(obj["spec"])
    errors = _errors(crd_validator, obj)
    assert errors and any(where in e for e in errors), errors


def test_query_reads_a_series_the_chart_rules_record():
    rules = yaml.safe_load(RULES.read_text())
    records = {r.get("record") for group in rules["groups"] for r in group["rules"]}
    assert keda.LOAD_METRIC in records


@pytest.mark.parametrize("change, message", [
    ({"target_load_per_replica": 0}, "targetLoadPerReplica must be > 0"),
    ({"target_load_per_replica": math.nan}, "targetLoadPerReplica must be > 0"),
    ({"prometheus_address": ""}, "must be an http(s) URL"),
    ({"prometheus_address": "prometheus:9090"}, "must be an http(s) URL"),
    ({"fallback_failures": -1}, "fallback failures must be >= 0"),
    ({"name": ""}, "name and namespace are required"),
], ids=["target-zero", "target-nan", "no-address", "no-scheme",
        "negative-fallback", "no-name"])
def test_bad_params_are_refused_with_a_message(change, message):
    with pytest.raises(ValueError, match="^keda mode: ") as info:
        ScaledObjectParams(**{**MINIMAL, **change})
    assert message in str(info.value)


@pytest.mark.parametrize("value, text", [(32, "32"), (32.0, "32"), (0.5, "0.5"), (12.25, "12.25")])
def test_format_threshold(value, text):
    assert keda.format_threshold(value) == text


def test_builder_module_imports_no_client_library_only_pure_operator_modules():
    tree = ast.parse(Path(keda.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert {m.split(".")[0] for m in imported}.isdisjoint({"kopf", "kubernetes", "aiohttp", "httpx"})
    assert {m for m in imported if m.startswith("fleet_operator")} == {
        "fleet_operator.builders.hpa", "fleet_operator.context", "fleet_operator.names", "fleet_operator.spec.fleet"}


# --- from a FleetSpec: what build_children renders in keda mode ---

def keda_fleet(**autoscaling):
    spec = {"model": {"source": "Qwen/Qwen3-0.6B"}, "image": "registry.example/scorer:1",
            "autoscaling": {"enabled": True, "mode": "keda", **autoscaling}}
    return parse_fleet("qwen-scorer", "team-a", spec, OperatorConfig(prometheus_address=PROMETHEUS))


def test_a_keda_fleet_renders_a_valid_scaled_object_on_its_own_scale_subresource(crd_validator):
    fleet = keda_fleet(minReplicas=2, maxReplicas=6, targetLoadPerReplica=12.5,
                       keda={"authenticationRef": "prom-creds"})
    obj = build_scaled_object(scaled_object_params(fleet))
    assert _errors(crd_validator, obj) == []
    spec = obj["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "scoring.fleet.dev/v1alpha1",
                                      "kind": "ScoringFleet", "name": "qwen-scorer"}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 6)
    assert spec["fallback"]["replicas"] == 2
    (trigger,) = spec["triggers"]
    assert trigger["metadata"]["serverAddress"] == PROMETHEUS
    assert trigger["metadata"]["threshold"] == "12.5"
    assert trigger["authenticationRef"]["name"] == "prom-creds"
    assert obj["metadata"]["labels"] == fleet_labels("qwen-scorer")


def test_hpa_and_keda_render_behavior_from_one_function():
    rules = {"scaleUp": {"stabilizationWindowSeconds": 30,
                         "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]},
             "scaleDown": {"selectPolicy": "Disabled"}}
    fleet = keda_fleet(**rules)
    behavior = build_scaled_object(scaled_object_params(fleet))["spec"]["advanced"][
        "horizontalPodAutoscalerConfig"]["behavior"]
    hpa = build_hpa(fleet)
    assert behavior == hpa["spec"]["behavior"] == hpa_behavior(fleet.autoscaling)
    assert behavior["scaleUp"]["policies"] == [{"type": "Pods", "value": 2, "periodSeconds": 60}]
    assert behavior["scaleDown"]["selectPolicy"] == "Disabled"
    kubernetes_validate.validate(hpa, "1.30.0", strict=True)


@pytest.mark.parametrize("autoscaling, kinds", [
    ({"enabled": True, "mode": "keda"}, ["Deployment", "Service", "PodDisruptionBudget", "ScaledObject"]),
    ({"enabled": True, "mode": "hpa"},
     ["Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"]),
    ({"enabled": True, "mode": "native"}, ["Deployment", "Service", "PodDisruptionBudget"]),
    ({"enabled": False, "mode": "keda"}, ["Deployment", "Service", "PodDisruptionBudget"]),
], ids=["keda", "hpa", "native", "keda-disabled"])
def test_build_children_has_one_owner_of_replicas_per_mode(autoscaling, kinds):
    spec = {"model": {"source": "m"}, "image": "i", "autoscaling": autoscaling}
    fleet = parse_fleet("qwen-scorer", "team-a", spec, OperatorConfig(prometheus_address=PROMETHEUS))
    # (the NetworkPolicy, on by default, has nothing to do with who owns replicas)
    assert [c["kind"] for c in build_children(fleet) if c["kind"] != "NetworkPolicy"] == kinds
    assert wants_scaled_object(fleet) is (kinds[-1] == "ScaledObject")
    assert fleet.autoscaling.is_native is (autoscaling == {"enabled": True, "mode": "native"})
