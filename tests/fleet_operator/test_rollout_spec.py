"""spec.rollout -> the Deployment's RollingUpdate strategy: the default never lowers serving
capacity, integers and percentages pass through as a Deployment takes them, and the one setting
that could never replace a pod (both 0) is refused by the parser and by the CRD's rule."""
from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from fleet_operator.builders import build_deployment
from fleet_operator.spec.fleet import SpecError, parse_fleet
from tests.fleet_operator.crd_schema import ROLLOUT_CEL_MESSAGE, ROOT, load_crd, load_yaml, schema_errors
from tests.fleet_operator.test_builders import IMAGE, K8S_VERSION


def fleet(rollout=None):
    spec = {"model": {"source": "Qwen/Qwen3-0.6B"}, "image": IMAGE}
    if rollout is not None:
        spec["rollout"] = rollout
    return parse_fleet("qwen", "team-a", spec)


def strategy(rollout=None):
    return build_deployment(fleet(rollout))["spec"]["strategy"]


def test_by_default_a_rollout_adds_one_pod_before_it_removes_one():
    assert strategy() == strategy({}) == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


@pytest.mark.parametrize("rollout,expected", [
    ({"maxSurge": "25%"}, {"maxSurge": "25%", "maxUnavailable": 0}),
    ({"maxSurge": 0, "maxUnavailable": 1}, {"maxSurge": 0, "maxUnavailable": 1}),  # GPU-scarce
    ({"maxSurge": 3, "maxUnavailable": "50%"}, {"maxSurge": 3, "maxUnavailable": "50%"}),
    ({"maxSurge": "0%", "maxUnavailable": "100%"}, {"maxSurge": "0%", "maxUnavailable": "100%"}),
], ids=["surge-percent", "no-surge", "int-and-percent", "percent-bounds"])
def test_rollout_settings_reach_the_deployment_as_written(rollout, expected):
    dep = build_deployment(fleet(rollout))
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": expected}
    kubernetes_validate.validate(dep, K8S_VERSION, strict=True)


@pytest.mark.parametrize("rollout", [
    {"maxSurge": 0}, {"maxSurge": 0, "maxUnavailable": 0}, {"maxSurge": "0%", "maxUnavailable": "0%"},
    {"maxSurge": "00%", "maxUnavailable": 0},
], ids=["surge-0-default-unavailable", "both-0", "both-0-percent", "zero-padded"])
def test_both_zero_could_never_replace_a_pod_and_is_refused(rollout):
    with pytest.raises(SpecError, match="cannot both be 0"):
        fleet(rollout)


@pytest.mark.parametrize("rollout,field", [
    ({"maxSurge": -1}, "maxSurge"), ({"maxSurge": "25"}, "maxSurge"), ({"maxSurge": 1.5}, "maxSurge"),
    ({"maxSurge": True}, "maxSurge"), ({"maxUnavailable": "101%"}, "maxUnavailable"),
    ({"maxUnavailable": "-1%"}, "maxUnavailable"),
], ids=["negative", "no-percent-sign", "float", "bool", "over-100-percent", "negative-percent"])
def test_a_bad_rollout_value_is_a_spec_error_naming_the_field(rollout, field):
    with pytest.raises(SpecError, match=rf"spec\.rollout\.{field}"):
        fleet(rollout)


def _doc(rollout):
    doc = copy.deepcopy(load_yaml(ROOT / "examples" / "minimal.yaml"))
    doc["spec"]["rollout"] = rollout
    return doc


@pytest.mark.parametrize("rollout,valid", [
    ({}, True), ({"maxSurge": "25%"}, True), ({"maxSurge": 0, "maxUnavailable": 1}, True),
    ({"maxSurge": 0}, False), ({"maxSurge": "0%", "maxUnavailable": 0}, False),
    ({"maxUnavailable": "150%"}, False), ({"maxSurge": "x"}, False),
], ids=["default", "percent", "gpu-scarce", "surge-0", "both-0", "over-100", "not-a-percent"])
def test_the_crd_schema_and_its_rules_agree_with_the_parser(rollout, valid):
    errors = schema_errors(_doc(rollout))
    assert (errors == []) is valid, errors
    try:
        fleet(rollout)
        parsed = True
    except SpecError:
        parsed = False
    assert parsed is valid


def test_the_crd_carries_the_rule_the_tests_check_by_hand():
    [version] = load_crd()["spec"]["versions"]
    rollout = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["rollout"]
    [rule] = rollout["x-kubernetes-validations"]
    assert rule["message"] == ROLLOUT_CEL_MESSAGE
    assert "self.maxSurge == 0" in rule["rule"] and "self.maxUnavailable == 0" in rule["rule"]
    assert {k: p["default"] for k, p in rollout["properties"].items()} == {
        "maxSurge": 1, "maxUnavailable": 0}
