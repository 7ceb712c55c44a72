"""The operator's layers, until import-linter holds them: pure modules reach no I/O library, even
through another module of the package, and nothing imports the handlers or the tick's I/O upwards."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.fleet_operator.crd_schema import ROOT

IO_LIBRARIES = {"kubernetes", "kopf", "aiohttp", "httpx", "urllib3", "requests"}
PURE = ["names", "clock", "quantity", "crd", "fields", "spec", "drift", "status", "context",
        "builders", "builders.deployment", "builders.service", "builders.pdb", "builders.hpa",
        "builders.scaled_object",
        "autoscaling.spec", "autoscaling.values", "autoscaling.history", "autoscaling.replicas",
        "autoscaling.behavior", "autoscaling.decide", "autoscaling.scale_in",
        "builders.gateway", "builders.gateway_rbac", "autoscaling.zero", "sources", "network_spec",
        "builders.network_policy"]


def source(module: str) -> Path:
    base = ROOT / "fleet_operator" / Path(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def imports(module: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source(module).read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            # `from fleet_operator import kube` names a module too
            found |= {f"{node.module}.{alias.name}" for alias in node.names
                      if node.module == "fleet_operator"}
    return found


def reachable(module: str) -> set[str]:
    """Every import reachable from `module` through modules of fleet_operator."""
    seen, todo, out = set(), [module], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for name in imports(current):
            out.add(name)
            if name.startswith("fleet_operator.") and source(name.removeprefix("fleet_operator.")).exists():
                todo.append(name.removeprefix("fleet_operator."))
    return out


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_reach_no_io_library(module):
    reached = reachable(module)
    assert {name for name in reached if name.split(".")[0] in IO_LIBRARIES} == set()
    assert not {"fleet_operator.kube", "fleet_operator.handlers", "fleet_operator.reconcile",
                "fleet_operator.autoscaling.tick", "fleet_operator.autoscaling.scraper"} & reached


def test_nothing_imports_the_handlers_but_the_entry_point():
    importers = [p.relative_to(ROOT) for p in (ROOT / "fleet_operator").rglob("*.py")
                 if "handlers" in {n.rsplit(".", 1)[-1] for n in imports_of_file(p)}]
    assert [str(p) for p in importers] == ["fleet_operator/__main__.py"]


def imports_of_file(path: Path) -> set[str]:
    module = str(path.relative_to(ROOT / "fleet_operator").with_suffix("")).replace("/", ".")
    return imports(module.removesuffix(".__init__"))
