"""The size limits every product package keeps: no function over 50 lines, no module over 300.

Counted from the source (ast), docstrings and comments included, as a reader meets them. Covers
server/, fleet_operator/ and gateway/ (when the package is there).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("server", "fleet_operator", "gateway", "scoringfleet_contract")
MAX_FUNCTION_LINES = 50
MAX_MODULE_LINES = 300


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_product_function_is_longer_than_50_lines(package):
    assert [f for path in modules(package) for f in long_functions(path)] == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_product_module_is_longer_than_300_lines(package):
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in modules(package)}
    assert {p: n for p, n in sizes.items() if n > MAX_MODULE_LINES} == {}
