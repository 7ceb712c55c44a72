"""docs/architecture.md names only what exists, names every module of the packages it maps, and
its import facts hold.

Forward: every path in backticks that ends in a file suffix or `/` (`engine.py`, `builders/`,
`tests/reliability/checks.py`) is a file or folder of the repository (matched as a path suffix, so
a table may name a module relative to its package), and every relative link resolves. Work not yet
in the tree is exempt where the doc says so: lines marked "(landing)" and the section "Where the
next features fit". Backward: each module of server/, gateway/, kube_emulator/, fleet_operator/ and
scoringfleet_contract/ is named in its package's section (server/, gateway/ and fleet_operator/: each has a row in the
module tables, its own or its folder's, which then names it), and each top-level folder under
version control is in the tree listing.
Imports, read from the code (ast, lazy imports too): the layer table of each of the four sections
holds (a module imports only from layers below its own; kube_emulator and fleet_operator: its own
or below); each module imports only the project's modules and third-party packages its row's
"May import" column names (so a sentence such as "the gateway imports nothing from the operator"
cannot stand next to gateway/app.py's row); fleet_operator's pure row is pyproject.toml's list of
pure modules (the import-linter contract, their one home).
"""
from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
import tomllib
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
MAPPED_PACKAGES = ("server", "gateway", "kube_emulator", "fleet_operator", "scoringfleet_contract")
# the packages whose section has `| Module | Owns | May import |` tables
IMPORT_TABLES = ("server", "gateway", "fleet_operator")
SAME_LAYER_ALLOWED = {"server": False, "gateway": False, "kube_emulator": True, "fleet_operator": True,
                      "scoringfleet_contract": False}
PURE_CONTRACT = "fleet_operator's pure modules import no I/O library"


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


@functools.cache
def modules(package: str) -> dict[str, Path]:
    """Every module of `package` by dotted name ("fleet_operator.tick"; a package's
    __init__.py by the package's name)."""
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        if "tests" in path.relative_to(ROOT / package).parts:
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def under(name: str, package: str) -> list[str]:
    """The modules a map path names: `tick.py` or `autoscaling/decide.py` one, `builders/` all under it."""
    dotted = f"{package}." + name.removesuffix(".py").strip("/").replace("/", ".")
    if name.endswith("/"):
        return [m for m in modules(package) if m == dotted or m.startswith(dotted + ".")]
    return [dotted] if dotted in modules(package) else []


def layers(package: str) -> dict[str, int]:
    """Module -> row of the section's `| Layer | Modules |` table (0 on top). A row's text may
    mention a module of a lower row (e.g. `routing.py`'s parse): the last row naming it counts."""
    table = re.search(r"^\| Layer \| Modules \|\n\|[-|]+\|\n((?:\|.*\n)+)", section(f"{package}/"), re.M)
    assert table, f"the {package}/ section has no layer table"
    rows = {}
    for row, line in enumerate(table.group(1).splitlines()):
        for name in re.findall(r"`((?:\w+/)*(?:\w+\.py|\w+/))`", line.split("|")[2]):
            assert under(name, package), f"the {package}/ layer table names {name}, which is not a module"
            rows.update(dict.fromkeys(under(name, package), row))
    return rows


def imported(path: Path) -> tuple[set[str], set[str]]:
    """(the project's modules `path` imports, the third-party top-level packages it imports), at any
    depth of the file (lazy imports too). `from a import b` counts a.b when that is a module."""
    known = {m for package in MAPPED_PACKAGES for m in modules(package)}
    ours, theirs = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module
                     for a in node.names]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in MAPPED_PACKAGES:
                ours.add(name)
            elif top not in sys.stdlib_module_names and top != "__future__":
                theirs.add(top)
    return ours, theirs


@pytest.mark.parametrize("package", MAPPED_PACKAGES)
def test_imports_point_down_the_layer_table(package):
    rows = layers(package)
    upward = []
    for module, row in rows.items():
        for target in imported(modules(package)[module])[0] & rows.keys():
            same = rows[target] == row and target != module
            if rows[target] < row or (same and not SAME_LAYER_ALLOWED[package]):
                upward.append(f"{module} -> {target}")
    assert sorted(upward) == [], f"imports against docs/architecture.md's {package}/ layers"


def module_tables(package: str) -> list[tuple[str, list[list[str]]]]:
    """The section's `| Module | Owns | May import |` tables: (the folder they describe, relative to
    the package: "" or e.g. "autoscaling/", named at the start of the paragraph above; rows)."""
    text = section(f"{package}/")
    header = "| Module | Owns | May import |\n"
    tables, start = [], 0
    while (at := text.find(header, start)) != -1:
        before = text[start:at].strip().split("\n\n")[-1]
        folder = re.match(r"`((?:\w+/)+)`", before)
        body = re.match(r"\|[-|]+\|\n((?:\|.*\n?)+)", text[at + len(header):])
        rows = [[cell.strip() for cell in line.strip().strip("|").split(" | ")]
                for line in body.group(1).splitlines()]
        tables.append((folder.group(1) if folder else "", rows))
        start = at + len(header) + body.end()
    assert tables, f"the {package}/ section has no module table"
    return tables


def may_import(cell: str, package: str, folder: str) -> tuple[set[str], set[str]]:
    """(the project's modules or packages a "May import" cell allows, the third-party names it
    allows). Backticked names are modules, relative to the table's folder, then to the package,
    or absolute (`fleet_operator.names`); what is in parentheses says what of them, and counts
    not; bare words are third-party packages; "nothing" is nothing."""
    cell = re.sub(r"\([^)]*\)", "", cell)
    known = {m for p in MAPPED_PACKAGES for m in modules(p)}
    ours = set()
    for name in re.findall(r"`([\w.]+)`", cell):
        candidates = [name] if name.split(".")[0] in MAPPED_PACKAGES else \
            [f"{package}.{folder.replace('/', '.')}{name}", f"{package}.{name}"]
        found = [c for c in candidates if c in known]
        assert found, f"the {package}/ map's May import names `{name}`, which is not a module"
        ours.add(found[0])
    words = {w for w in re.findall(r"[A-Za-z_][\w]*", re.sub(r"`[^`]*`", "", cell))} - {"nothing"}
    return ours, words


def allows(allowed: set[str], module: str) -> bool:
    return any(module == a or module.startswith(a + ".") for a in allowed)


def import_rows(package: str) -> list[tuple[str, list[str], set[str], set[str]]]:
    """(the row's name, the modules it covers, the project's modules and third-party packages it
    allows), for every row of the package's module tables that has a May import cell."""
    out = []
    for folder, rows in module_tables(package):
        for name, _owns, cell in rows:
            path = name.strip("`")
            covered = under(folder + path, package)
            assert covered, f"the {package}/ module table has a row for {name}, which is not a module"
            if cell:
                out.append((name, covered, *may_import(cell, package, folder)))
    return out


@pytest.mark.parametrize("package", IMPORT_TABLES)
def test_every_module_has_a_row_of_its_own_or_its_folders(package):
    described = set()
    for folder, rows in module_tables(package):
        for name, owns, cell in rows:
            path = name.strip("`")
            described.update(under(folder + path, package))
            if path.endswith("/") and cell:  # a folder's row (not one with a table of its own) names its modules
                unnamed = [m for m in under(folder + path, package)
                           if m != f"{package}.{(folder + path).strip('/').replace('/', '.')}"
                           and f"`{m.rsplit('.', 1)[1]}.py`" not in owns]
                assert unnamed == [], f"the row of {name} does not name {unnamed}"
    assert sorted(set(modules(package)) - described - {package}) == []


@pytest.mark.parametrize("package", IMPORT_TABLES)
def test_modules_import_only_what_their_may_import_column_allows(package):
    wrong = []
    for name, covered, ours, theirs in import_rows(package):
        for module in covered:
            own_folder = {module.rsplit(".", 1)[0]} if name.endswith("/`") else set()
            project, third_party = imported(modules(package)[module])
            wrong += [f"{module} -> {m}" for m in sorted(project)
                      if m != module and not allows(ours | own_folder, m)]
            wrong += [f"{module} -> {t}" for t in sorted(third_party - theirs)]
    assert wrong == [], f"imports that docs/architecture.md's {package}/ May import columns leave out"


def test_the_layer_tables_pure_row_is_pyprojects_list_of_pure_modules():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (pure,) = [c["source_modules"] for c in contracts if c["name"] == PURE_CONTRACT]
    listed = {m for name in pure for m in under(name.removeprefix("fleet_operator.").replace(".", "/")
                                                + ("/" if (ROOT / name.replace(".", "/")).is_dir() else ".py"),
                                                "fleet_operator")}
    rows = layers("fleet_operator")
    assert listed == {m for m, row in rows.items() if row == max(rows.values())}
