"""One schema source: every default in the CRD is the one the operator applies, and a minimal fleet's
Deployment carries them field by field. The parser reads them from the CRD shipped in the package
(fleet_operator/spec/crd.py), which tools/sync_crd.py keeps identical to crds/scoringfleet.yaml."""
from __future__ import annotations

import copy
from typing import Any

import pytest

from fleet_operator.builders import build_deployment
from fleet_operator.spec import crd
from fleet_operator.spec.fleet import parse_fleet
from tests.fleet_operator.crd_schema import ROOT, load_crd, load_yaml
from tools import sync_crd

MINIMAL = load_yaml(ROOT / "examples" / "minimal.yaml")


def spec_schema() -> dict[str, Any]:
    return load_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def crd_defaults(node: dict[str, Any] = None, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(path under .spec, default) of every property with a default, read from crds/ itself."""
    node = spec_schema() if node is None else node
    found = []
    for key, prop in (node.get("properties") or {}).items():
        if "default" in prop:
            found.append((path + (key,), prop["default"]))
        found += crd_defaults(prop, path + (key,))
    return found


def api_server_defaulted(value: Any, node: dict[str, Any]) -> Any:
    """What the API server stores: defaults filled in wherever the schema has one, recursively."""
    if not isinstance(value, dict) or "properties" not in node:
        return value
    out = dict(value)
    for key, prop in node["properties"].items():
        if key not in out and "default" in prop:
            out[key] = copy.deepcopy(prop["default"])
        if key in out:
            out[key] = api_server_defaulted(out[key], prop)
    return out


def with_field(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(MINIMAL["spec"])
    node = spec
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return spec


def parse(spec: dict[str, Any]):
    return parse_fleet(MINIMAL["metadata"]["name"], "default", spec)


# A valid value other than the default, to prove the parser reads the field at all.
def other_value(path: tuple[str, ...], default: Any) -> Any:
    enum = crd.spec_schema(*path).get("enum")
    if enum:
        return next(v for v in enum if v != default)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default + 0.25
    return {"cpu": "5", "memory": "17Gi"}[path[-1]]


DEFAULTS = crd_defaults()
LEAF_DEFAULTS = [(p, d) for p, d in DEFAULTS if d != {}]


def test_the_crd_has_the_defaults_the_spec_documents():
    assert len(LEAF_DEFAULTS) >= 20  # a walk that found nothing would make the tests below vacuous
    assert (("server", "port"), 30000) in DEFAULTS
    assert (("autoscaling", "scaleDown", "stabilizationWindowSeconds"), 300) in DEFAULTS


@pytest.mark.parametrize("path,default", DEFAULTS, ids=[".".join(p) for p, _ in DEFAULTS])
def test_every_crd_default_is_the_one_the_operator_applies(path, default):
    # leaving the field out and writing the CRD's default must give the same fleet
    assert parse(with_field(path, copy.deepcopy(default))) == parse(MINIMAL["spec"])


# What a cross-field rule needs beside a flipped default (an enabled InferencePool names its picker).
COMPANIONS = {("inferencePool", "enabled"): (("inferencePool", "endpointPicker", "name"), "epp")}


@pytest.mark.parametrize("path,default", LEAF_DEFAULTS, ids=[".".join(p) for p, _ in LEAF_DEFAULTS])
def test_every_defaulted_field_is_read(path, default):
    # counterfactual: a parser that ignored the field would pass the test above by accident
    spec = with_field(path, other_value(path, default))
    if path in COMPANIONS:
        (*parents, key), value = COMPANIONS[path]
        node = spec
        for parent in parents:
            node = node.setdefault(parent, {})
        node[key] = value
    assert parse(spec) != parse(MINIMAL["spec"])


def test_a_fleet_the_api_server_defaulted_parses_as_the_minimal_one():
    stored = api_server_defaulted(MINIMAL["spec"], spec_schema())
    assert stored != MINIMAL["spec"]
    assert parse(stored) == parse(MINIMAL["spec"])
    assert build_deployment(parse(stored)) == build_deployment(parse(MINIMAL["spec"]))


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_a_minimal_fleets_deployment_carries_the_crd_defaults_field_by_field():
    d = {".".join(p): v for p, v in DEFAULTS}
    deployment = build_deployment(parse(MINIMAL["spec"]))
    pod = deployment["spec"]["template"]
    [container] = pod["spec"]["containers"]
    args, resources = container["args"], container["resources"]
    assert deployment["spec"]["replicas"] == d["replicas"]
    assert flag(args, "--port") == str(d["server.port"])
    assert container["ports"][0]["containerPort"] == d["server.port"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(d["server.port"])
    assert flag(args, "--dtype") == d["model.dtype"]
    assert flag(args, "--max-running-requests") == str(d["server.maxRunningRequests"])
    assert flag(args, "--max-total-tokens") == str(d["server.maxTotalTokens"])
    assert flag(args, "--max-queued-requests") == str(d["server.maxQueuedRequests"])
    assert flag(args, "--request-timeout") == str(d["server.requestTimeoutSeconds"])
    assert "--max-prefill-tokens" not in args  # no CRD default: the server picks by device
    assert flag(args, "--device") == ("cuda" if d["resources.gpus"] > 0 else "cpu")
    assert resources["limits"]["nvidia.com/gpu"] == str(d["resources.gpus"])
    for kind in ("requests", "limits"):
        assert (resources[kind]["cpu"], resources[kind]["memory"]) == \
            (d["resources.cpu"], d["resources.memory"])
    assert flag(args, "--drain-timeout") == str(d["server.requestTimeoutSeconds"])
    # grace: preStop sleep + the drain + the server's last responses + a margin
    assert pod["spec"]["terminationGracePeriodSeconds"] == 5 + d["server.requestTimeoutSeconds"] + 5 + 5
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == d["server.startupTimeoutSeconds"]
    # no spec.model.cache: a per-pod emptyDir; no Secret refs: no secret in env
    assert {"name": "cache", "emptyDir": {}} in pod["spec"]["volumes"]
    assert not [e for e in container["env"] if "valueFrom" in e]


def test_the_package_ships_the_crd_byte_for_byte():
    assert sync_crd.is_in_sync(sync_crd.SOURCE, sync_crd.PACKAGE_COPY), \
        "stale fleet_operator/scoringfleet.crd.yaml: run python tools/sync_crd.py"
    assert sync_crd.main(["--check"]) == 0
    assert crd.load_crd() == load_crd()


def test_an_installed_package_carries_the_crd():
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert crd.CRD_FILE in pyproject["tool"]["setuptools"]["package-data"]["fleet_operator"]


def test_a_minimal_fleets_gateway_carries_the_crd_defaults_field_by_field():
    from fleet_operator.builders.gateway import build_gateway_deployment, build_gateway_service

    d = {".".join(p): v for p, v in DEFAULTS}
    fleet = parse(with_field(("gateway", "enabled"), True))
    assert d["gateway.enabled"] is False and parse(MINIMAL["spec"]).gateway.enabled is False
    deployment = build_gateway_deployment(fleet)
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert deployment["spec"]["replicas"] == d["gateway.replicas"]
    assert flag(container["args"], "--port") == str(d["gateway.port"])
    assert container["ports"][0]["containerPort"] == d["gateway.port"]
    assert build_gateway_service(fleet)["spec"]["ports"][0]["port"] == d["gateway.port"]
    assert container["resources"]["requests"] == {"cpu": d["gateway.resources.cpu"],
                                                  "memory": d["gateway.resources.memory"]}
