"""Fixtures of the operator tests: the emulator's (kube_api), and the operator running against it."""
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kube_emulator.fixtures import *  # noqa: F401,F403
from tests.fleet_operator.crd_schema import CRD_PATH
from tests.fleet_operator.operator_process import Cluster, running_operator


@pytest.fixture()
def cluster(kube_api: Any, tmp_path: Path) -> Iterator[Cluster]:
    """The CRD registered and the operator running cluster-wide (-A)."""
    kube_api.apply_file(CRD_PATH)
    with running_operator(kube_api, tmp_path / "operator.log", "-A") as proc:
        yield Cluster(kube_api)
    assert proc.returncode in (0, -15), f"the operator exited with {proc.returncode}"
