"""The chart's files, without Helm: the values schema, the CRD copy, Chart.yaml."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from tools import sync_crd

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "scoring-fleet"


@pytest.fixture(scope="module")
def values() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def test_default_values_satisfy_the_schema(values, validator):
    assert [e.message for e in validator.iter_errors(values)] == []


def _with(values: dict, path: str, value) -> dict:
    changed = copy.deepcopy(values)
    *parents, leaf = path.split(".")
    node = changed
    for key in parents:
        node = node[key]
    node[leaf] = value
    return changed


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("operator.logLevel", "loud"),
        ("image.pullPolicy", "Sometimes"),
        ("watchNamespaces", ["Not_A_Namespace"]),
        ("watchNamespaces", ["team-a", "team-a"]),
        ("crds.keep", "yes"),
        ("operator.livenessPort", 80),          # privileged port: the operator is non-root
        ("replicaCount", 2),                     # the knob is operator.replicas
        ("monitoring.podMonitor.interval", "often"),
        ("keda.prometheusAddress", "prometheus:9090"),
        ("operator.replicas", 0),
        ("operator.peering.lifetimeSeconds", 1),  # kopf's keep-alive needs a few seconds
    ],
    ids=["log-level", "pull-policy", "namespace-name", "namespace-twice", "keep-not-bool",
         "privileged-port", "unknown-key", "interval-format", "keda-address-not-a-url",
         "no-operator", "lifetime-too-short"],
)
def test_schema_rejects(values, validator, path, value):
    assert list(validator.iter_errors(_with(values, path, value))) != []


def test_chart_crd_is_a_byte_copy_of_crds_source():
    # crds/scoringfleet.yaml is the one source; tools/sync_crd.py refreshes the chart's copy.
    assert sync_crd.SOURCE.is_file(), "crds/scoringfleet.yaml is missing"
    assert sync_crd.is_in_sync(), "stale chart CRD: run python tools/sync_crd.py"


def test_sync_crd_rewrites_a_stale_copy(tmp_path):
    source, stale = tmp_path / "crd.yaml", tmp_path / "files" / "copy.yaml"
    source.write_text("kind: CustomResourceDefinition\n")
    assert sync_crd.sync(source, stale) is True
    assert sync_crd.is_in_sync(source, stale)
    assert sync_crd.sync(source, stale) is False


def test_chart_metadata():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    pyproject_version = next(line.split('"')[1] for line in (ROOT / "pyproject.toml").read_text()
                             .splitlines() if line.startswith("version"))
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == pyproject_version  # the image tag the chart runs by default
