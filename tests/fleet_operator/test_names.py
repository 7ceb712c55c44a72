"""One home per fact: the API's names in names.py (matching the CRD), one clock, one time format;
and the selectors names.py spells select the pods its labels mark, and no others."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from fleet_operator import names
from fleet_operator.builders.gateway import build_gateway_deployment
from fleet_operator.clock import format_time, parse_time
from fleet_operator.spec.fleet import parse_fleet
from kube_emulator.selectors import format_match_labels, parse_label_selector
from tests.fleet_operator.crd_schema import ROOT, load_crd

PRODUCT = sorted((ROOT / "fleet_operator").rglob("*.py"))


def product_modules_containing(text: str) -> list[str]:
    return [str(p.relative_to(ROOT)) for p in PRODUCT if text in p.read_text()]


def test_the_names_match_the_crd():
    crd = load_crd()
    assert crd["spec"]["group"] == names.GROUP
    assert crd["spec"]["names"]["kind"] == names.KIND
    assert crd["spec"]["names"]["plural"] == names.PLURAL
    assert crd["spec"]["versions"][0]["name"] == names.VERSION
    assert crd["metadata"]["name"] == f"{names.PLURAL}.{names.GROUP}"


def test_the_api_group_is_spelled_in_exactly_one_product_module():
    # the contract's, which the operator's names and the gateway's discovery read
    packages = ("server", "gateway", "fleet_operator", "scoringfleet_contract")
    everywhere = [str(p.relative_to(ROOT)) for package in packages
                  for p in sorted((ROOT / package).rglob("*.py")) if names.GROUP in p.read_text()]
    assert everywhere == ["scoringfleet_contract/facts.py"]


@pytest.mark.parametrize("text", ["datetime.now(", "time.time()", "strftime(", "isoformat("])
def test_one_clock_and_one_time_format(text):
    # the clock is passed in (OperatorContext.clock); times are written by clock.format_time only
    assert set(product_modules_containing(text)) <= {"fleet_operator/clock.py"}


@pytest.mark.parametrize("at,text", [
    (datetime(2026, 11, 29, 18, 42, 5, tzinfo=timezone.utc), "2026-11-29T18:42:05Z"),
    (datetime(2026, 11, 29, 18, 42, 5, 250000, tzinfo=timezone.utc), "2026-11-29T18:42:05.250000Z"),
    (datetime(2026, 11, 29, 19, 42, 5, tzinfo=timezone(timedelta(hours=1))), "2026-11-29T18:42:05Z"),
], ids=["whole-seconds", "fractional", "other-zone"])
def test_format_time_is_rfc3339_utc_and_parse_time_reads_it_back(at, text):
    assert format_time(at) == text
    assert parse_time(text) == at


def pod(labels: dict[str, str]) -> dict:
    return {"metadata": {"labels": labels}}


# "qwen-gateway": a fleet named as fleet qwen's gateway children are; "qwen" is then the other
@pytest.mark.parametrize("name, other", [("qwen", "qwen-gateway"), ("qwen-gateway", "qwen")])
def test_each_selector_string_selects_its_own_pods_and_no_others(name, other):
    # status.selector and the tick's gateway pod list are strings the API server parses: read them
    # as it does (the emulator's parser), against every label set the builders put on pods
    fleet, gateway = parse_label_selector(names.selector_string(name)), \
        parse_label_selector(names.serves_selector_string(name))
    assert fleet(pod(names.fleet_labels(name))) and gateway(pod(gateway_pod_labels(name)))
    assert not fleet(pod(gateway_pod_labels(name))) and not gateway(pod(names.fleet_labels(name)))
    assert not fleet(pod(names.fleet_labels(other))) and not gateway(pod(gateway_pod_labels(other)))
    # the strings say what the label dicts say (the Deployment's matchLabels, the Service's selector)
    assert names.selector_labels(name).items() <= names.fleet_labels(name).items()
    assert names.gateway_selector_labels(name).items() <= names.gateway_labels(name).items()
    for labels, string in ((names.selector_labels, names.selector_string),
                           (names.serves_selector_labels, names.serves_selector_string)):
        assert format_match_labels({"matchLabels": labels(name)}) == string(name)


def test_a_gateway_that_routes_to_other_fleets_is_selected_by_each_of_them():
    labels = gateway_pod_labels("front", fleets=["reranker", "classifier"])
    for served in ("front", "reranker", "classifier"):
        assert parse_label_selector(names.serves_selector_string(served))(pod(labels))
    assert not parse_label_selector(names.serves_selector_string("scorer"))(pod(labels))


def gateway_pod_labels(name: str, fleets: list[str] | None = None) -> dict[str, str]:
    """The labels the gateway Deployment's builder puts on its pods."""
    spec = {"model": {"source": "m"}, "image": "i", "gateway": {"enabled": True, "fleets": fleets or []}}
    deployment = build_gateway_deployment(parse_fleet(name, "ns", spec))
    return deployment["spec"]["template"]["metadata"]["labels"]
