"""The Kubernetes API emulator's fixtures (kube_api) for the operator's integration tests."""
from tests.kube_emulator.fixtures import *  # noqa: F401,F403
