"""scoringfleet_contract: each fact the server, the gateway and the operator share has one writer.

Read from the code (ast): for each fact a detector of its spelling (the value, not a mention in
prose); every product module of server/, gateway/ and fleet_operator/ is searched, and the fact must
be written in scoringfleet_contract/facts.py and nowhere else. The chart, which cannot import it,
may set only the variables it names. The module itself imports only the standard library.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from fleet_operator import context, peering
from scoringfleet_contract import facts

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "scoringfleet_contract" / "facts.py"
PROGRAMS = ("server", "gateway", "fleet_operator")
PATHS = {facts.HEALTH_PATH, facts.HEALTH_GENERATE_PATH, facts.READY_PATH, facts.LOAD_PATH, facts.METRICS_PATH}


def strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def assigns(name_pattern: str):
    """A module or class assigning a name matching `name_pattern` a literal (a second copy of a value)."""
    def found(node: ast.AST) -> bool:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []
        return any(isinstance(t, ast.Name) and re.fullmatch(name_pattern, t.id) for t in targets) \
            and isinstance(node.value, (ast.Constant, ast.BinOp, ast.Dict, ast.Set, ast.Call))
    return found


def path_set(node: ast.AST) -> bool:
    """A set literal of two or more of the shared paths, spelled or named (which are probes, which
    are quiet)."""
    named = [e for e in getattr(node, "elts", ()) if isinstance(e, ast.Name) and e.id.endswith("_PATH")]
    return isinstance(node, ast.Set) and len(set(strings(node)) & PATHS) + len(named) >= 2


def probe_path(node: ast.AST) -> bool:
    """A probe's path spelled in a manifest: {"path": "/health", ...}."""
    return isinstance(node, ast.Dict) and any(
        isinstance(k, ast.Constant) and k.value == "path" and isinstance(v, ast.Constant) and v.value in PATHS
        for k, v in zip(node.keys, node.values))


def max_request_bytes(node: ast.AST) -> bool:
    return (isinstance(node, ast.BinOp) and ast.unparse(node) == "8 * 1024 * 1024") or \
        (isinstance(node, ast.Constant) and node.value == 8 * 1024 * 1024)


def string_matching(pattern: str):
    def found(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(re.search(pattern, node.value))
    return found


def key_rule(node: ast.AST) -> bool:
    """`key != key.strip()` (or a token stripped and compared): the key rule's test."""
    return isinstance(node, ast.Compare) and any(
        isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "strip"
        for c in node.comparators)


FACTS = {
    "env var names, one prefix": string_matching(r"SCORING_?FLEET_"),
    "the error types": string_matching(r"^(" + "|".join(set(facts.ERROR_TYPES.values())) + r")$"),
    "the error body's shape": lambda n: isinstance(n, ast.Dict) and {"object", "message", "type", "code"}
    <= set(strings(n)),
    "the 413's text": string_matching(r"exceeds the limit of"),
    "the 401's text": string_matching(r"^missing or wrong API key"),
    "the key rule": key_rule,
    "probe and quiet paths": path_set,
    "the probes' paths": probe_path,
    "8 MiB": max_request_bytes,
    "defaults and bounds": assigns(r"DEFAULT_(MAX_REQUEST_BYTES|HEADER_TIMEOUT_S)|\w*SHUTDOWN\w*|API_KEY_ENV"
                                   r"|ERROR_TYPES|QUIET_PATHS|PROBE_PATHS"),
}
# Written by the operator's manifests only, from the contract's names: found nowhere is right.
ONLY_READ_IN_CONTRACT = {"the probes' paths"}


def product_modules() -> list[Path]:
    return sorted(p for program in PROGRAMS for p in (ROOT / program).rglob("*.py"))


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstrings' nodes: prose that mentions a fact does not write it."""
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                                          ast.AsyncFunctionDef))]
    return {id(scope.body[0].value) for scope in scopes
            if scope.body and isinstance(scope.body[0], ast.Expr) and isinstance(scope.body[0].value, ast.Constant)}


def writers(detector) -> list[str]:
    found = []
    for path in [CONTRACT, *product_modules()]:
        tree = ast.parse(path.read_text())
        prose = docstrings(tree)
        lines = sorted({node.lineno for node in ast.walk(tree)
                        if hasattr(node, "lineno") and id(node) not in prose and detector(node)})
        found += [f"{path.relative_to(ROOT)}:{line}" for line in lines]
    return found


@pytest.mark.parametrize("fact", FACTS)
def test_each_shared_fact_is_written_in_the_contract_only(fact):
    found = writers(FACTS[fact])
    assert [w for w in found if not w.startswith("scoringfleet_contract/")] == [], \
        f"{fact}: written outside scoringfleet_contract/facts.py"
    assert found or fact in ONLY_READ_IN_CONTRACT, f"{fact}: the detector finds nothing, not even the contract's own"


def env_names(module) -> set[str]:
    return {value for name, value in vars(module).items() if name.endswith("_ENV") and isinstance(value, str)}


# The variables only the operator reads (its settings, which the chart sets) are its own.
OPERATOR_ENV = env_names(context) | {peering.LIFETIME_ENV}


def test_every_env_var_the_programs_read_has_the_one_prefix():
    names = env_names(facts) | OPERATOR_ENV - {context.NAMESPACE_ENV, peering.IDENTITY_ENV}
    assert len(names) >= 6 and all(value.startswith(facts.ENV_PREFIX) for value in names)
    assert facts.ENV_PREFIX == "SCORINGFLEET_"  # the users' variable, SCORINGFLEET_API_KEY, set the spelling


def test_the_chart_sets_only_variables_the_contract_or_the_operator_names():
    template = (ROOT / "charts" / "scoring-fleet" / "templates" / "deployment.yaml").read_text()
    ours = set(re.findall(r"name: (SCORING\w+)", template))
    assert ours and ours <= env_names(facts) | OPERATOR_ENV


def test_the_contract_imports_only_the_standard_library():
    for path in (ROOT / "scoringfleet_contract").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            assert all(n.split(".")[0] in sys.stdlib_module_names | {"__future__"} for n in names), path


@pytest.mark.parametrize(("key", "refused"), [
    (None, False), ("s3cret", False), ("", True), ("s3cret\n", True), (" s3cret", True),
], ids=["none", "plain", "empty", "trailing-newline", "leading-space"])
def test_the_key_rule(key, refused):
    problem = facts.api_key_problem(key)
    assert (problem is not None) is refused
    assert not key or problem is None or key.strip() not in problem  # never the key itself


@pytest.mark.parametrize(("header", "key", "authorized"), [
    ("", None, True), ("Bearer k", "k", True), ("bearer  k ", "k", True), ("Bearer x", "k", False),
    ("Basic k", "k", False), ("", "k", False),
], ids=["no-key", "bearer", "case-and-spaces", "wrong", "other-scheme", "missing"])
def test_is_authorized(header, key, authorized):
    assert facts.is_authorized(header, key) is authorized


def test_the_error_body_and_its_type():
    assert facts.error_body(413, "why") == {"object": "error", "message": "why", "type": "BadRequestError",
                                            "param": None, "code": 413}
    assert facts.error_body(418, "why", param="gateway")["type"] == "BadRequestError"  # any other status


@pytest.mark.parametrize(("path", "quiet"), [
    ("/health", True), ("/metrics?x=1", True), ("/get_load", True), ("/v1/score", False), ("/healthz", False),
])
def test_is_quiet(path, quiet):
    assert facts.is_quiet(path) is quiet


def test_http_port_is_the_container_port_the_operator_names_http():
    pod = {"spec": {"containers": [{"ports": [{"name": "metrics", "containerPort": 9090}]},
                                   {"ports": [{"name": facts.HTTP_PORT_NAME, "containerPort": 30080}]}]}}
    assert facts.http_port(pod) == 30080
    assert facts.http_port({"spec": {"containers": [{"ports": [{"containerPort": 80}]}]}}) is None
    assert facts.http_port({}) is None
