"""spec/autoscaling.py: spec.autoscaling -> AutoscalingSpec (camelCase, the CRD's defaults)."""
from __future__ import annotations

import pytest

from fleet_operator.context import OperatorConfig
from fleet_operator.spec.autoscaling import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    AutoscalingSpec,
    KedaSpec,
    ScalingPolicy,
    ScalingRules,
    parse_autoscaling,
)
from fleet_operator.spec.fleet import SpecError, parse_fleet

MODEL = {"source": "Qwen/Qwen3-0.6B"}
IMAGE = "registry.example/scoring-fleet:1"
PROM = "http://prometheus.monitoring.svc:9090"


def parse(spec, name="qwen", default_image=None):
    return parse_fleet(name, "team-a", spec, OperatorConfig(default_image=default_image))


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


def keda(fields=None, default_address=None, **autoscaling):
    mapping = {"enabled": True, "mode": "keda", **autoscaling}
    if fields is not None:
        mapping["keda"] = fields
    return parse_fleet("qwen", "team-a", {"model": MODEL, "image": IMAGE, "autoscaling": mapping},
                       OperatorConfig(prometheus_address=default_address)).autoscaling


@pytest.mark.parametrize("fields, default_address, expected", [
    (None, PROM, KedaSpec(PROM)),
    ({"prometheusAddress": "https://thanos.example:10902"}, PROM, KedaSpec("https://thanos.example:10902")),
    ({"prometheusAddress": PROM}, None, KedaSpec(PROM)),
    ({"authenticationRef": "prom-creds"}, PROM, KedaSpec(PROM, "prom-creds")),
], ids=["operator-default", "fleet-overrides", "fleet-only", "authentication-ref"])
def test_keda_trigger_settings_are_the_fleets_else_the_operators(fields, default_address, expected):
    a = keda(fields, default_address)
    assert a.keda == expected
    assert (a.is_keda, a.is_native, a.is_hpa) == (True, False, False)


@pytest.mark.parametrize("fields, default_address, autoscaling, message", [
    (None, None, {}, r"keda mode needs a Prometheus address for its trigger: set "
                     r"spec\.autoscaling\.keda\.prometheusAddress, or the operator's "
                     r"SCORINGFLEET_PROMETHEUS_ADDRESS"),
    ({"prometheusAddress": "prometheus:9090"}, None, {},
     r"spec\.autoscaling\.keda\.prometheusAddress must be an http\(s\) URL, got 'prometheus:9090'"),
    ({"prometheusAddress": 9090}, PROM, {}, r"prometheusAddress must be a string"),
    (None, PROM, {"minReplicas": 0}, r"spec\.autoscaling\.minReplicas must be >= 1"),
], ids=["no-address-anywhere", "not-a-url", "not-a-string", "min-zero"])
def test_keda_spec_errors(fields, default_address, autoscaling, message):
    with pytest.raises(SpecError, match=message):
        keda(fields, default_address, **autoscaling)


def test_keda_settings_are_read_only_in_keda_mode():
    # Off, or another mode: no address needed, and a stale keda block changes nothing.
    off = keda(None, None, enabled=False)
    assert off.keda == KedaSpec() and not off.is_keda
    assert keda({"prometheusAddress": PROM}, None, mode="hpa").keda == KedaSpec()
