"""The operator's layers, read from their one home: pyproject.toml's import-linter contracts.

`make lint` runs lint-imports; these tests hold the same contracts under pytest alone (a run of
the suite without the lint step still catches a break), from the same list: the pure modules (each
package with every module under it, as import-linter reads a source module) reach no forbidden I/O
library and no fleet_operator module outside that list, not even through another module; and
nothing imports the handlers but the entry point.
"""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from tests.fleet_operator.crd_schema import ROOT

PURE_CONTRACT = "fleet_operator's pure modules import no I/O library"


def contract(name: str) -> dict:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    found = [c for c in contracts if c["name"] == name]
    assert len(found) == 1, f"pyproject.toml has no import-linter contract named {name!r}"
    return found[0]


def source(module: str) -> Path:
    base = ROOT / "fleet_operator" / Path(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def with_submodules(module: str) -> list[str]:
    """`module` (relative to fleet_operator), and every module under it if it is a package."""
    base = ROOT / "fleet_operator" / Path(*module.split("."))
    if not base.is_dir():
        return [module]
    below = (p.relative_to(ROOT / "fleet_operator").with_suffix("") for p in sorted(base.rglob("*.py")))
    return [".".join(p.parts).removesuffix(".__init__") for p in below]


def pure_modules() -> list[str]:
    modules = [m.removeprefix("fleet_operator.") for m in contract(PURE_CONTRACT)["source_modules"]]
    return [sub for module in modules for sub in with_submodules(module)]


PURE = pure_modules()


def imports(module: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source(module).read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            # `from fleet_operator import kube` and `from fleet_operator.autoscaling import tick`
            # name modules too (is_module() tells them from names inside a module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names
                      if node.module.split(".")[0] == "fleet_operator"}
    return found


def is_module(name: str) -> bool:
    return name.startswith("fleet_operator.") and source(name.removeprefix("fleet_operator.")).exists()


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
            if is_module(name):
                todo.append(name.removeprefix("fleet_operator."))
    return out


def test_the_pure_list_names_modules_that_exist():
    assert "autoscaling.decide" in PURE and "builders.deployment" in PURE  # packages expanded
    assert [m for m in PURE if not source(m).exists()] == []


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_reach_no_io_library(module):
    forbidden = set(contract(PURE_CONTRACT)["forbidden_modules"])
    reached = reachable(module)
    assert {name for name in reached if name.split(".")[0] in forbidden} == set()
    # nor a module of the operator outside the list (kube, reconcile, tick, scraper, ...), whose
    # own imports the contract does not hold; a package's __init__ that imports nothing is no step
    outside = {name.removeprefix("fleet_operator.") for name in reached if is_module(name)}
    assert {m for m in outside - set(PURE) if imports(m)} == set()


def sibling(name: str) -> str:
    """The entry of fleet_operator/ that `name` is, or lies in: a module, or a package as a whole."""
    return name.removeprefix("fleet_operator.").split(".")[0]


def test_no_arrow_points_back_up_between_fleet_operators_entries():
    """Drawn at fleet_operator/'s level (a package as one box), the imports form no circle: so the
    layers can be stacked with every arrow pointing down. (autoscaling/ holding the tick made one:
    spec -> autoscaling -> spec.)"""
    modules = [".".join(p.relative_to(ROOT / "fleet_operator").with_suffix("").parts).removesuffix(".__init__")
               for p in (ROOT / "fleet_operator").rglob("*.py")]
    arrows: dict[str, set[str]] = {}
    for module in modules:
        targets = {sibling(n) for n in imports(module) if is_module(n)} - {sibling(module)}
        arrows.setdefault(sibling(module), set()).update(targets)
    placed: list[str] = []  # bottom first: an entry is placed once everything it imports is
    while len(placed) < len(arrows):
        ready = sorted(e for e, targets in arrows.items() if e not in placed and targets <= set(placed))
        assert ready, f"a circle among {sorted(set(arrows) - set(placed))}"
        placed += ready
    assert arrows["autoscaling"] <= {"spec", "clock"}  # the pure decision reads no I/O module


def test_nothing_imports_the_handlers_but_the_entry_point():
    handlers = contract("handlers are the top layer: only __main__ imports them")
    assert handlers["protected_modules"] == ["fleet_operator.handlers"]
    importers = [p.relative_to(ROOT) for p in (ROOT / "fleet_operator").rglob("*.py")
                 if "handlers" in {n.rsplit(".", 1)[-1] for n in imports_of_file(p)}]
    assert [f"fleet_operator.{p.with_suffix('').name}" for p in importers] == handlers["allowed_importers"]


def imports_of_file(path: Path) -> set[str]:
    module = str(path.relative_to(ROOT / "fleet_operator").with_suffix("")).replace("/", ".")
    return imports(module.removesuffix(".__init__"))
