"""A Kubernetes API emulator for tests: kmock 0.8's KubernetesScaffold plus API-server semantics.

See README.md. Use the `kube_api` fixture (kube_emulator/fixtures.py); kmock is reached only
through kmock_seam.py.
"""
from kube_emulator.emulator import KubeEmulator

__all__ = ['KubeEmulator']
