"""Fixtures for the chart tests: the Helm tool venv (made on first use) and rendered releases."""
from __future__ import annotations

import pytest

from tests.packaging.helm_tool import HelmTool
from tools import helm_env


@pytest.fixture(scope="session")
def helm(tmp_path_factory) -> HelmTool:
    """helm-sdkpy in .tools/helm-venv; first use creates it from PyPI (~10 s), later runs reuse it."""
    try:
        python = helm_env.ensure_tool("helm")
    except helm_env.NoPythonError as exc:
        pytest.skip(f"helm-sdkpy needs Python >= 3.12: {exc}")
    return HelmTool(python=python, home=tmp_path_factory.mktemp("helm-home"))
