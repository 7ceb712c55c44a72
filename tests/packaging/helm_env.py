"""Small tool environments under .tools/ for what the project's Python 3.11 venv cannot hold.

helm-sdkpy (the real Helm library, as Python bindings) needs Python >= 3.12, while the project stays on
3.11 for torch; checkov brings a large dependency tree that has no place in the project's venv. Each
tool gets its own venv, made once from a Python >= 3.12 found on this machine (pyenv's versions count)
and reused afterwards.

    python tests/packaging/helm_env.py [helm|checkov]   # prints the tool venv's python, creating it if needed
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = ROOT / ".tools"
MIN_PYTHON = (3, 12)

# Pinned: the tests rely on these exact behaviours (helm-sdkpy's result keys, checkov's check ids).
TOOL_REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "helm": ("helm-sdkpy==0.1.32",),
    "checkov": ("checkov==3.3.30",),
}


class NoPythonError(RuntimeError):
    """No interpreter >= MIN_PYTHON on this machine."""


def _version_of(python: Path) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [str(python), "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return (int(out[0]), int(out[1])) if len(out) == 2 else None


def candidate_pythons() -> list[Path]:
    """Interpreters to try, best first: $TOOLS_PYTHON, python3.1x on PATH, then pyenv's versions
    (oldest first: 3.12 is the one helm-sdkpy was tried with here)."""
    found: list[Path] = []
    if os.environ.get("TOOLS_PYTHON"):
        found.append(Path(os.environ["TOOLS_PYTHON"]))
    for name in ("python3.12", "python3.13", "python3.14"):
        if path := shutil.which(name):
            found.append(Path(path))
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    # NOTE: pyenv's shims on PATH fail for versions that are not selected, so read its folders too.
    for version_dir in sorted((pyenv_root / "versions").glob("3.1[2-9]*")):
        found.append(version_dir / "bin" / "python")
    return found


def find_python(minimum: tuple[int, int] = MIN_PYTHON) -> Path:
    """The first candidate interpreter at least `minimum`; NoPythonError when there is none."""
    for python in candidate_pythons():
        version = _version_of(python)
        if version is not None and version >= minimum:
            return python
    raise NoPythonError(f"no Python >= {minimum[0]}.{minimum[1]} found "
                        "(set TOOLS_PYTHON, or `pyenv install 3.12`)")


def stamp_name(requirements: tuple[str, ...]) -> str:
    """The marker file of a finished install; it names the pins, so changing one rebuilds the venv."""
    return ".installed-" + "-".join(r.replace("=", "").replace(">", "") for r in requirements)


def ensure_tool(tool: str, tools_dir: Path = TOOLS_DIR) -> Path:
    """The python of the tool's venv, creating it and installing its pinned packages on first use."""
    requirements = TOOL_REQUIREMENTS[tool]
    venv = tools_dir / f"{tool}-venv"
    python = venv / "bin" / "python"
    stamp = venv / stamp_name(requirements)
    if stamp.is_file() and python.is_file():
        return python
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([str(find_python()), "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    *requirements], check=True, timeout=900)
    stamp.touch()
    return python


def main(argv: list[str]) -> int:
    tool = argv[0] if argv else "helm"
    try:
        print(ensure_tool(tool))
    except NoPythonError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
