"""Fixtures of the reliability tests: the Kubernetes API emulator (kube_api) and a tiny model."""
import pytest

from tests.kube_emulator.fixtures import *  # noqa: F401,F403
from tests.server.support import build_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Llama + tokenizer saved once per session (loads in well under a second)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))
