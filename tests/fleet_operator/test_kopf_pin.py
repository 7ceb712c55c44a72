"""Our HA code restates some of kopf's internals (peering.py: the default lifetime, --dev's
priority, the legacy namespace variable, the peering resources' group; __main__.kopf_run_params:
how `kopf run` reads its options). kopf is pinned once, in pyproject.toml; these tests tie each
restated fact to the installed kopf's own, so a kopf upgrade that moves one fails here, not in a
cluster."""
from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import kopf
import pytest
from kopf._cogs.structs import references
from kopf._core.reactor import running

from fleet_operator.__main__ import kopf_run_params
from fleet_operator.peering import GROUP_VERSION, KOPF_DEFAULT_LIFETIME_S, PeeringConfig

ROOT = Path(__file__).resolve().parents[2]


def test_kopf_is_pinned_once_and_installed_as_pinned():
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (requirement,) = [d for d in dependencies if re.match(r"kopf\b", d)]
    assert re.fullmatch(r"kopf==[\d.]+", requirement), requirement  # exact: we restate its internals
    assert requirement == f"kopf=={version('kopf')}"


def test_the_default_lifetime_is_kopfs():
    assert KOPF_DEFAULT_LIFETIME_S == kopf.OperatorSettings().peering.lifetime


def test_the_peering_resources_are_kopfs():
    for selector, kind in ((references.CLUSTER_PEERINGS_K, "clusterkopfpeerings"),
                           (references.NAMESPACED_PEERINGS_K, "kopfpeerings")):
        assert (f"{selector.group}/{selector.version}", selector.any_name) == (GROUP_VERSION, kind)


CASES = {
    # argv, environment -> what kopf's own `run` passes on
    "dev": (["--dev"], {}),
    "priority": (["-p", "5"], {}),
    "dev-wins-over-priority": (["--dev", "-p", "5"], {}),
    "namespaces": (["-n", "a", "-n", "b"], {}),
    "legacy-namespace-env": (["-n", "a"], {"KOPF_RUN_NAMESPACE": "legacy"}),
    "standalone-env": ([], {"KOPF_RUN_STANDALONE": "1"}),
    "peering-env": ([], {"KOPF_RUN_PEERING": "from-env"}),
    "clusterwide": (["-A", "--peering", "p"], {}),
}


@pytest.mark.parametrize("argv, environ", CASES.values(), ids=CASES.keys())
def test_run_options_are_read_as_kopf_reads_them(argv, environ, monkeypatch):
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    seen = {}
    monkeypatch.setattr(running, "run", lambda **kwargs: seen.update(kwargs))
    kopf.cli.main(args=["run", *argv], standalone_mode=False, prog_name="kopf")
    ours = PeeringConfig.from_run_args(kopf_run_params(argv))
    if seen["priority"] is not None:  # kopf's, else ours is derived from the start time
        assert ours.priority == seen["priority"]
    assert set(ours.namespaces) == set(seen["namespaces"])
    assert ours.enabled == (bool(seen["peering_name"]) and not seen["standalone"])
    assert ours.name == (seen["peering_name"] or "default")
