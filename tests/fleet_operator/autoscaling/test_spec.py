"""autoscaling/spec.py: spec.autoscaling -> AutoscalingSpec (camelCase, the CRD's defaults), is_native()."""
from __future__ import annotations

import pytest

from fleet_operator.autoscaling.spec import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    AutoscalingSpec,
    ScalingPolicy,
    ScalingRules,
    is_native,
    parse_autoscaling,
)
from fleet_operator.spec import SpecError, parse_fleet

MODEL = {"source": "Qwen/Qwen3-0.6B"}
IMAGE = "registry.example/scoring-fleet:1"


def parse(spec, name="qwen", default_image=None):
    return parse_fleet(name, "team-a", spec, default_image)


def test_autoscaling_is_parsed_from_camel_case():
    fleet = parse({"model": MODEL, "image": IMAGE, "autoscaling": {
        "enabled": True, "mode": "hpa", "minReplicas": 2, "maxReplicas": 6,
        "targetLoadPerReplica": 12.5, "scrapeIntervalSeconds": 2, "tolerance": 0.2,
        "maxMissingFraction": 0.5,
        "scaleUp": {"stabilizationWindowSeconds": 30, "selectPolicy": "Min",
                    "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]},
        "scaleDown": {"selectPolicy": "Disabled"},
    }})
    assert fleet.autoscaling == AutoscalingSpec(
        enabled=True, mode="hpa", min_replicas=2, max_replicas=6, target_load_per_replica=12.5,
        scrape_interval_s=2.0, tolerance=0.2, max_missing_fraction=0.5,
        scale_up=ScalingRules(30, (ScalingPolicy("Pods", 2, 60),), "Min"),
        # Only selectPolicy given: the direction's default window and policies stay.
        scale_down=ScalingRules(DEFAULT_SCALE_DOWN.stabilization_window_s,
                                DEFAULT_SCALE_DOWN.policies, "Disabled"),
    )


def test_scale_up_defaults_differ_from_scale_down_defaults():
    fleet = parse({"model": MODEL, "image": IMAGE, "autoscaling": {"scaleUp": {}, "scaleDown": {}}})
    assert fleet.autoscaling.scale_up == DEFAULT_SCALE_UP
    assert fleet.autoscaling.scale_down == DEFAULT_SCALE_DOWN


def test_parse_autoscaling_alone_reads_what_parse_fleet_reads():
    mapping = {"enabled": True, "minReplicas": 2, "scaleDown": {"stabilizationWindowSeconds": 3}}
    fleet = parse({"model": MODEL, "image": IMAGE, "autoscaling": mapping})
    assert parse_autoscaling(mapping) == fleet.autoscaling
    assert parse_autoscaling(None) == AutoscalingSpec()


def test_parse_autoscaling_names_the_given_path_in_errors():
    with pytest.raises(SpecError, match=r"^autoscaling\.minReplicas \(3\) must be <= maxReplicas"):
        parse_autoscaling({"minReplicas": 3, "maxReplicas": 2}, "autoscaling")


@pytest.mark.parametrize("spec,native", [
    ({}, False),
    ({"autoscaling": {"enabled": False}}, False),
    ({"autoscaling": {"enabled": True}}, True),  # mode defaults to native
    ({"autoscaling": {"enabled": True, "mode": "native"}}, True),
    ({"autoscaling": {"enabled": True, "mode": "hpa"}}, False),
    ({"autoscaling": {"enabled": "true"}}, False),  # not a boolean: the reconciler rejects it
    ({"autoscaling": []}, False),
], ids=["no-autoscaling", "disabled", "default-mode", "native", "hpa", "string-true", "not-an-object"])
def test_is_native(spec, native):
    assert is_native(spec) is native
