"""tests/packaging/helm_env.py: how the Python >= 3.12 tool venvs are found, made once and reused."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.packaging import helm_env


def test_no_new_enough_python_is_reported_not_guessed():
    with pytest.raises(helm_env.NoPythonError, match="no Python >= 99.0"):
        helm_env.find_python(minimum=(99, 0))


def test_tools_python_comes_first(monkeypatch):
    monkeypatch.setenv("TOOLS_PYTHON", sys.executable)
    assert helm_env.candidate_pythons()[0] == Path(sys.executable)
    assert helm_env.find_python(minimum=sys.version_info[:2]) == Path(sys.executable)


def test_a_stamped_venv_is_reused_without_installing(tmp_path, monkeypatch):
    venv = tmp_path / "helm-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    (venv / helm_env.stamp_name(helm_env.TOOL_REQUIREMENTS["helm"])).touch()
    # Finding an interpreter is the first step of a (re)build: it must not be reached.
    monkeypatch.setattr(helm_env, "find_python", lambda *a: pytest.fail("rebuilt the venv"))
    assert helm_env.ensure_tool("helm", tools_dir=tmp_path) == venv / "bin" / "python"
