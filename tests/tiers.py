"""Which tests are system tests: they start a process or the Kubernetes API emulator.

`make test-unit` leaves them out (`-m "not slow and not system"`: the real model's tests are
`slow`). Nobody marks them: the root conftest.py marks every test whose function, or a fixture it
uses, names a starter: a process (subprocess, Popen, ...), the emulator (kube_api, run_kube_api,
KubeEmulator), or a function or class of tests/, bench/, tools/ or kube_emulator/ whose own code
names one (followed name by name to a fixed point; a name defined twice counts if either starts).
"""
from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STARTERS = frozenset({"subprocess", "Popen", "create_subprocess_exec", "create_subprocess_shell",
                      "multiprocessing", "ProcessPoolExecutor", "fork", "kube_api", "run_kube_api",
                      "KubeEmulator"})
# Where the helpers are: what tests call (support modules, conftests' fixtures, bench/, tools/, the
# emulator's fixture module); test modules and the emulator's internals are not helpers.
HELPER_GLOBS = ("tests/**/*.py", "kube_emulator/tests/*.py", "bench/**/*.py", "tools/*.py", "kube_emulator/fixtures.py")


def names_in(node: ast.AST) -> set[str]:
    """The names a piece of code uses (bare names and imported ones), and starters reached as
    attributes (subprocess.Popen, asyncio.create_subprocess_exec)."""
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr in STARTERS}
    return names | {a.asname or a.name.split(".")[-1] for n in ast.walk(node)
                    if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}


def is_helper(path: Path) -> bool:
    return not path.name.startswith("test_")


def grow(refs: dict[str, set[str]], starting: set[str]) -> set[str]:
    """`starting` and every name of `refs` whose code uses one of them, to a fixed point."""
    while grown := {name for name, used in refs.items() if name not in starting and used & starting}:
        starting |= grown
    return starting


def top_level_refs(path: Path) -> dict[str, set[str]]:
    refs: dict[str, set[str]] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            refs.setdefault(node.name, set()).update(names_in(node))
    return refs


@functools.cache
def starting_names() -> frozenset[str]:
    """The starters, and every top-level function or class of the helpers whose code uses one."""
    refs: dict[str, set[str]] = {}
    for pattern in HELPER_GLOBS:
        for path in filter(is_helper, ROOT.glob(pattern)):
            for name, used in top_level_refs(path).items():
                refs.setdefault(name, set()).update(used)
    return frozenset(grow(refs, set(STARTERS)))


@functools.cache
def module_starting_names(path: Path) -> frozenset[str]:
    """starting_names() and the test module's own functions and classes that use one."""
    return frozenset(grow(top_level_refs(path), set(starting_names())))


def code_names(function) -> set[str]:
    try:
        return names_in(ast.parse(textwrap.dedent(inspect.getsource(function))))
    except (OSError, TypeError, SyntaxError):
        return set(STARTERS)  # its code cannot be read: not known to be a unit test


def is_system(item) -> bool:
    """The test's code, or a fixture it uses (transitively), starts a process or the emulator."""
    used = set(item.fixturenames)
    functions = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    if info is not None:
        functions += [defs[-1].func for defs in info.name2fixturedefs.values() if defs]
    for function in filter(None, functions):
        used |= code_names(function)
    return bool(used & module_starting_names(Path(str(item.path))))


def mark_system_tests(items, marker) -> None:
    for item in items:
        if is_system(item):
            item.add_marker(marker)
