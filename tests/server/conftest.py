import pytest

from tests.kit.models import build_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Llama + tokenizer saved once per session (loads in well under a second)."""
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))
