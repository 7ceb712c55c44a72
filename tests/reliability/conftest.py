"""Fixtures of the reliability tests: the Kubernetes API emulator (kube_api), the real operator
against it (operator), the chart rendered by Helm (render), and a tiny model."""
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kube_emulator.fixtures import *  # noqa: F401,F403
from tests.fleet_operator.crd_schema import CRD_PATH
from tests.fleet_operator.operator_process import Cluster, running_operator
from tests.kit.models import build_tiny_model

# The chart rendered by a real helm install into the emulator (for the operator pod's PSS check).
from tests.packaging.conftest import api_create, helm, render, render_release  # noqa: F401


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Llama + tokenizer saved once per session (loads in well under a second)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@dataclass
class Operator:
    cluster: Cluster
    proc: Any
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def assert_alive_without_traceback(self) -> None:
        assert self.proc.poll() is None, f"the operator exited: {self.log()[-3000:]}"
        assert "Traceback" not in self.log(), self.log()[-5000:]


@pytest.fixture()
def operator(kube_api: Any, tmp_path: Path) -> Iterator[Operator]:
    """The CRD registered and `python -m fleet_operator --standalone -A` running (stopped after)."""
    kube_api.apply_file(CRD_PATH)
    with running_operator(kube_api, tmp_path / "operator.log", "-A") as proc:
        yield Operator(Cluster(kube_api), proc, tmp_path / "operator.log")
