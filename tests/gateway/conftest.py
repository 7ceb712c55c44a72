"""The Kubernetes API emulator's `kube_api` fixture, for the discovery tests (the one import of it)."""
from kube_emulator.fixtures import *  # noqa: F401,F403
