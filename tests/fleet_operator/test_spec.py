"""spec/fleet.py: CR spec -> FleetSpec with defaults, or SpecError with a message naming the field."""
from __future__ import annotations

import pytest

from fleet_operator.context import OperatorConfig, is_http_url
from fleet_operator.spec.autoscaling import AutoscalingSpec
from fleet_operator.spec.fleet import (
    GatewaySpec,
    ModelSpec,
    ResourceSpec,
    ServerSpec,
    SpecError,
    parse_fleet,
)

MODEL = {"source": "Qwen/Qwen3-0.6B"}
IMAGE = "registry.example/scoring-fleet:1"


def parse(spec, name="qwen", default_image=None):
    return parse_fleet(name, "team-a", spec, OperatorConfig(default_image=default_image))


def test_minimal_spec_takes_every_default():
    fleet = parse({"model": MODEL, "image": IMAGE})
    assert fleet.model == ModelSpec(source="Qwen/Qwen3-0.6B", served_name="qwen", dtype="auto")
    assert (fleet.name, fleet.namespace, fleet.image, fleet.replicas) == ("qwen", "team-a", IMAGE, 1)
    assert fleet.resources == ResourceSpec(gpus=1, cpu="4", memory="16Gi")
    assert fleet.server == ServerSpec(port=30000, max_running_requests=256, max_prefill_tokens=None,
                                      max_total_tokens=65536, max_queued_requests=1024,
                                      request_timeout_s=60)
    assert fleet.autoscaling == AutoscalingSpec()
    assert (dict(fleet.node_selector), fleet.tolerations, dict(fleet.affinity), fleet.env) == \
        ({}, (), {}, ())


def test_replicas_outside_min_max_is_not_an_error():
    # Clamping to [min, max] is the autoscaler's job, not a reason to reject the spec.
    fleet = parse({"model": MODEL, "image": IMAGE, "replicas": 20,
                   "autoscaling": {"enabled": True, "maxReplicas": 4}})
    assert fleet.replicas == 20


def test_served_name_and_dtype_come_from_the_model():
    fleet = parse({"model": {"source": "/m.gguf", "name": "smol", "dtype": "float32"},
                   "image": IMAGE})
    assert fleet.model == ModelSpec("/m.gguf", "smol", "float32")


def test_cpu_fleet_without_image_uses_the_operator_default_image():
    fleet = parse({"model": MODEL, "resources": {"gpus": 0}}, default_image="op:1")
    assert fleet.image == "op:1"


def test_integer_quantities_are_accepted():
    fleet = parse({"model": MODEL, "image": IMAGE, "resources": {"cpu": 2, "memory": "512Mi"}})
    assert (fleet.resources.cpu, fleet.resources.memory) == ("2", "512Mi")


def test_env_tolerations_and_scheduling_are_carried():
    spec = {"model": MODEL, "image": IMAGE, "nodeSelector": {"gpu": "l4"},
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {}}, "env": [{"name": "A", "value": "1"}]}
    fleet = parse(spec)
    assert dict(fleet.node_selector) == {"gpu": "l4"}
    assert fleet.tolerations == ({"key": "k", "operator": "Exists"},)
    assert dict(fleet.affinity) == {"nodeAffinity": {}}
    assert fleet.env == ({"name": "A", "value": "1"},)


LONG = "a" * 64


@pytest.mark.parametrize("name,spec,default_image,message", [
    ("qwen", None, None, "spec.model is required"),
    ("qwen", {"image": IMAGE}, None, "spec.model is required"),
    ("qwen", {"model": {}, "image": IMAGE}, None, "spec.model.source is required"),
    ("qwen", {"model": MODEL}, "op:1", "spec.image is required when resources.gpus > 0"),
    ("qwen", {"model": MODEL, "resources": {"gpus": 0}}, None, "no default image"),
    (LONG, {"model": MODEL, "image": IMAGE}, None, "is 64 characters"),
    ("Qwen_1", {"model": MODEL, "image": IMAGE}, None, "DNS-1035"),
    ("1qwen", {"model": MODEL, "image": IMAGE}, None, "DNS-1035"),
    ("qwen", {"model": MODEL, "image": IMAGE, "resources": {"memory": "lots"}}, None,
     "spec.resources.memory is not a Kubernetes quantity"),
    ("qwen", {"model": MODEL, "image": IMAGE, "resources": {"cpu": "0"}}, None,
     "spec.resources.cpu must be > 0"),
    ("qwen", {"model": MODEL, "image": IMAGE, "resources": {"cpu": True}}, None,
     "spec.resources.cpu must be a Kubernetes quantity"),
    ("qwen", {"model": MODEL, "image": IMAGE, "replicas": "3"}, None,
     "spec.replicas must be an integer"),
    ("qwen", {"model": MODEL, "image": IMAGE, "replicas": -1}, None, "spec.replicas must be >= 0"),
    ("qwen", {"model": {**MODEL, "dtype": "int4"}, "image": IMAGE}, None,
     "spec.model.dtype must be one of"),
    ("qwen", {"model": MODEL, "image": IMAGE, "server": {"port": 70000}}, None,
     "spec.server.port must be <= 65535"),
    ("qwen", {"model": MODEL, "image": IMAGE, "autoscaling": {"minReplicas": 5, "maxReplicas": 2}},
     None, "minReplicas (5) must be <= maxReplicas (2)"),
    ("qwen", {"model": MODEL, "image": IMAGE, "autoscaling": {"targetLoadPerReplica": 0}}, None,
     "targetLoadPerReplica must be > 0"),
    ("qwen", {"model": MODEL, "image": IMAGE, "autoscaling": {"tolerance": float("nan")}}, None,
     "tolerance must be a number"),
    ("qwen", {"model": MODEL, "image": IMAGE, "autoscaling": {"mode": "adapter"}}, None,
     "spec.autoscaling.mode must be one of native, hpa, keda"),
    ("qwen", {"model": MODEL, "image": IMAGE, "autoscaling": {"enabled": "yes"}}, None,
     "spec.autoscaling.enabled must be true or false"),
    ("qwen", {"model": MODEL, "image": IMAGE, "autoscaling": {"scaleUp": {"policies": []}}}, None,
     "scaleUp.policies must list at least one policy"),
    ("qwen", {"model": MODEL, "image": IMAGE,
              "autoscaling": {"scaleDown": {"policies": [{"type": "Pods", "value": 1}]}}}, None,
     "spec.autoscaling.scaleDown.policies[0].periodSeconds is required"),
    ("qwen", {"model": MODEL, "image": IMAGE,
              "autoscaling": {"scaleDown": {"policies": [
                  {"type": "Nodes", "value": 1, "periodSeconds": 1}]}}}, None,
     "policies[0].type must be one of Pods, Percent"),
    ("qwen", {"model": MODEL, "image": IMAGE, "nodeSelector": {"gpu": 1}}, None,
     "spec.nodeSelector values must be strings"),
    ("qwen", {"model": MODEL, "image": IMAGE, "env": [{"value": "x"}]}, None,
     "spec.env[0].name is required"),
    ("qwen", {"model": MODEL, "image": IMAGE, "tolerations": {"key": "k"}}, None,
     "spec.tolerations must be a list of objects"),
], ids=["no-spec", "no-model", "no-source", "gpu-without-image", "cpu-no-default-image",
        "name-too-long", "name-not-dns", "name-starts-with-digit", "bad-memory", "zero-cpu",
        "bool-cpu", "replicas-string", "replicas-negative", "dtype-enum", "port-range",
        "min-above-max", "zero-target", "nan-tolerance", "mode-enum", "enabled-not-bool",
        "empty-policies", "policy-missing-period", "policy-type-enum", "node-selector-type",
        "env-without-name", "tolerations-not-list"])
def test_spec_error(name, spec, default_image, message):
    with pytest.raises(SpecError) as error:
        parse(spec, name=name, default_image=default_image)
    assert message in str(error.value)


def test_gateway_defaults_off_and_is_read_when_given():
    assert parse({"model": MODEL, "image": IMAGE}).gateway == GatewaySpec(
        enabled=False, replicas=1, port=30080, cpu="1", memory="512Mi")
    gateway = {"enabled": True, "replicas": 2, "port": 8080, "resources": {"cpu": "500m", "memory": "1Gi"}}
    assert parse({"model": MODEL, "image": IMAGE, "gateway": gateway}).gateway == GatewaySpec(
        enabled=True, replicas=2, port=8080, cpu="500m", memory="1Gi")


def test_min_replicas_zero_is_accepted_with_the_gateway_in_native_mode():
    fleet = parse({"model": MODEL, "image": IMAGE, "gateway": {"enabled": True},
                   "autoscaling": {"enabled": True, "minReplicas": 0}})
    assert (fleet.autoscaling.min_replicas, fleet.gateway.enabled) == (0, True)


ZERO_MIN = {"enabled": True, "minReplicas": 0}


def test_min_replicas_zero_is_accepted_without_a_gateway_of_its_own():
    # another fleet's gateway may route to it (spec.gateway.fleets): no rule on one object sees that
    fleet = parse({"model": MODEL, "image": IMAGE, "autoscaling": ZERO_MIN})
    assert (fleet.autoscaling.min_replicas, fleet.gateway.enabled) == (0, False)


def test_gateway_fleets_keep_their_order_without_repeats_or_the_fleet_itself():
    fleet = parse({"model": MODEL, "image": IMAGE,
                   "gateway": {"enabled": True, "fleets": ["b", "a", "b", "qwen"]}})
    assert fleet.gateway.fleets == ("b", "a")
    assert parse({"model": MODEL, "image": IMAGE}).gateway.fleets == ()


@pytest.mark.parametrize("spec,message", [
    ({"autoscaling": {**ZERO_MIN, "mode": "hpa"}, "gateway": {"enabled": True}},
     "minReplicas 0 needs autoscaling.mode native"),
    ({"gateway": {"fleets": ["b"]}}, "spec.gateway.fleets needs spec.gateway.enabled"),
    ({"gateway": {"enabled": True, "fleets": "b"}}, "spec.gateway.fleets must be a list"),
    ({"gateway": {"enabled": True, "fleets": ["B_1"]}}, "spec.gateway.fleets[0] must be a ScoringFleet's name"),
    ({"gateway": {"enabled": "yes"}}, "spec.gateway.enabled must be true or false"),
    ({"gateway": {"replicas": 0}}, "spec.gateway.replicas must be >= 1"),
    ({"gateway": {"port": 0}}, "spec.gateway.port must be >= 1"),
    ({"gateway": {"resources": {"memory": "lots"}}},
     "spec.gateway.resources.memory is not a Kubernetes quantity"),
], ids=["zero-in-hpa-mode", "fleets-without-gateway", "fleets-not-a-list", "fleets-bad-name",
        "enabled-not-bool", "replicas-zero", "port-zero",
        "bad-memory"])
def test_gateway_spec_error(spec, message):
    with pytest.raises(SpecError) as error:
        parse({"model": MODEL, "image": IMAGE, **spec})
    assert message in str(error.value)


def test_the_gateway_needs_room_for_its_suffix_in_the_name():
    gateway = {"model": MODEL, "image": IMAGE, "gateway": {"enabled": True}}
    assert parse(gateway, name="a" * 55).gateway.enabled
    with pytest.raises(SpecError, match=r"spec.gateway.enabled.*'a{56}-gateway', 64 characters.*at most 55"):
        parse(gateway, name="a" * 56)
    assert not parse({"model": MODEL, "image": IMAGE}, name="a" * 63).gateway.enabled  # off: 63 is fine


@pytest.mark.parametrize("value, ok", [
    ("http://prometheus.monitoring.svc:9090", True), ("https://p.example", True),
    ("prometheus:9090", False), ("ftp://p", False), ("http://", False), ("", False), (None, False),
])
def test_is_http_url_the_one_prometheus_address_check(value, ok):
    assert is_http_url(value) is ok
