"""A Kubernetes API emulator for tests: kmock 0.8's KubernetesScaffold plus API-server semantics.

See README.md. Use the `kube_api` fixture (tests/kube_emulator/fixtures.py).
"""
from tests.kube_emulator.emulator import KubeEmulator

__all__ = ['KubeEmulator']
