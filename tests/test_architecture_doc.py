"""docs/architecture.md names only what exists, and names every module of the packages it maps.

Forward: every path in backticks that ends in a file suffix or `/` (`engine.py`, `builders/`,
`tests/reliability/checks.py`) is a file or folder of the repository (matched as a path suffix, so
a table may name a module relative to its package), and every relative link resolves. Work not yet
in the tree is exempt where the doc says so: lines marked "(landing)" and the section "Where the
next features fit". Backward: each module of server/, gateway/ and kube_emulator/ is named in its
package's section, and each top-level folder under version control is in the tree listing.
The layer tables of those three sections hold: a module imports only from layers below its own
(kube_emulator: its own or below), read from the code's imports.
"""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
FUTURE_SECTIONS = ("Where the next features fit",)
LANDING = "(landing)"
SKIPPED_DIRS = {".git", ".venv", ".tools", ".pytest_cache", "__pycache__", "node_modules"}
MADE_ON_FIRST_USE = {".venv/", ".tools/"}  # named by the doc, absent from a clean clone
PATH_IN_CODE = re.compile(r"(?<![\w/.:-])((?:[\w.-]+/)*[\w-][\w.-]*\.(?:py|md|yaml|yml|json|toml|txt|sh)"
                          r"|(?:[\w.-]+/)+)(?![\w/])")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
MAPPED_PACKAGES = ("server", "gateway", "kube_emulator")
SAME_LAYER_ALLOWED = {"server": False, "gateway": False, "kube_emulator": True}


def doc_lines() -> list[str]:
    """The doc's lines that must be true now (future sections and landing lines left out)."""
    kept, in_future = [], False
    for line in DOC.read_text().splitlines():
        if line.startswith("#"):
            in_future = any(title in line for title in FUTURE_SECTIONS)
        if not in_future and LANDING not in line:
            kept.append(line)
    return kept


def repo_paths() -> set[str]:
    """Every file and folder of the checkout, relative to the root (folders end in '/')."""
    paths = set()
    stack = [ROOT]
    while stack:
        folder = stack.pop()
        for entry in folder.iterdir():
            if entry.name in SKIPPED_DIRS or entry.name.endswith(".egg-info"):
                continue
            relative = entry.relative_to(ROOT).as_posix()
            if entry.is_dir():
                paths.add(relative + "/")
                stack.append(entry)
            else:
                paths.add(relative)
    return paths


def named_paths(lines: list[str]) -> set[str]:
    names = set()
    for line in lines:
        for code in re.findall(r"`([^`]+)`", line):
            if "://" not in code:
                names.update(PATH_IN_CODE.findall(code))
    return names


def exists(name: str, paths: set[str]) -> bool:
    return any(path == name or path.endswith("/" + name) for path in paths)


def section(title: str) -> str:
    """The text of the doc's `## <title>` section, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", DOC.read_text(), re.M | re.S)
    assert match, f"docs/architecture.md has no '## {title}' section"
    return match.group(1)


def test_every_path_the_map_names_exists():
    paths = repo_paths()
    missing = sorted(name for name in named_paths(doc_lines()) - MADE_ON_FIRST_USE
                     if not exists(name, paths))
    assert missing == [], f"docs/architecture.md names paths that are not in the tree: {missing}"


def test_every_link_of_the_map_resolves():
    links = [link for line in doc_lines() for link in LINK.findall(line) if "://" not in link]
    broken = [link for link in links if not (DOC.parent / link).exists()]
    assert broken == []


@pytest.mark.parametrize("package", MAPPED_PACKAGES)
def test_every_module_of_the_package_is_on_the_map(package):
    text = section(f"{package}/")
    modules = sorted(p.name for p in (ROOT / package).glob("*.py") if p.name != "__init__.py")
    assert modules, f"{package}/ has no modules"
    unnamed = [name for name in modules if f"`{name}`" not in text and f"{package}/{name}`" not in text]
    assert unnamed == [], f"docs/architecture.md's {package}/ section does not name {unnamed}"


def test_every_tracked_top_level_folder_is_in_the_tree_listing():
    try:
        tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                                 check=True, timeout=30).stdout.split()
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout")
    folders = {path.split("/")[0] for path in tracked if "/" in path}
    listing = re.search(r"^```\n(.*?)^```", DOC.read_text(), re.M | re.S)
    assert listing, "docs/architecture.md has no tree listing"
    entries = [line.split()[0] for line in listing.group(1).splitlines() if line.strip()]
    assert sorted(folders - {entry.split("/")[0] for entry in entries}) == []
    assert sorted(entry for entry in entries if not (ROOT / entry).exists()) == []


def layers(package: str) -> dict[str, int]:
    """Module name -> row of the section's `| Layer | Modules |` table (0 on top). A row's text may
    mention a module of a lower row (e.g. `routing.py`'s parse): the last row naming it counts."""
    table = re.search(r"^\| Layer \| Modules \|\n\|[-|]+\|\n((?:\|.*\n)+)", section(f"{package}/"), re.M)
    assert table, f"the {package}/ section has no layer table"
    rows = {}
    for row, line in enumerate(table.group(1).splitlines()):
        for name in re.findall(r"`(\w+)\.py`", line.split("|")[2]):
            rows[name] = row
    return rows


def internal_imports(package: str, path: Path) -> set[str]:
    """The package's modules that `path` imports (at any depth of the file: lazy ones too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == package:
            parts = node.module.split(".")
            found.update([parts[1]] if len(parts) > 1 else [alias.name for alias in node.names])
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[1] for alias in node.names
                         if alias.name.startswith(package + "."))
    return found


@pytest.mark.parametrize("package", MAPPED_PACKAGES)
def test_imports_point_down_the_layer_table(package):
    rows = layers(package)
    upward = []
    for module, row in rows.items():
        path = ROOT / package / f"{module}.py"
        for imported in internal_imports(package, path) & rows.keys():
            same = rows[imported] == row and imported != module
            if rows[imported] < row or (same and not SAME_LAYER_ALLOWED[package]):
                upward.append(f"{module} -> {imported}")
    assert sorted(upward) == [], f"imports against docs/architecture.md's {package}/ layers"
