"""The ScoringFleet CRD as shipped inside this package: the one source of the spec's defaults and bounds.

fleet_operator/scoringfleet.crd.yaml is a byte-for-byte copy of crds/scoringfleet.yaml (tools/sync_crd.py
writes it, `--check` and the tests keep it honest), loaded with importlib.resources so an installed
package finds it too. The parsers of this package read every default, minimum,
maximum and enum from it instead of restating them. Pure: reads a package file, once.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import resources
from typing import Any

import yaml

CRD_FILE = "scoringfleet.crd.yaml"


@functools.cache
def load_crd() -> Mapping[str, Any]:
    """The whole CustomResourceDefinition document."""
    return yaml.safe_load(resources.files("fleet_operator").joinpath(CRD_FILE).read_text("utf-8"))


def spec_schema(*path: str) -> Mapping[str, Any]:
    """The openAPIV3Schema node of .spec, or of .spec.<path...> (e.g. "autoscaling", "scaleUp")."""
    node = load_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for key in path:
        node = node["properties"][key]
    return node


def default(*path: str) -> Any:
    """The CRD's default for .spec.<path>, or None when it has none."""
    return spec_schema(*path).get("default")
