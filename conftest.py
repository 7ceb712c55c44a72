"""pytest's hooks for every test folder (tests/ and kube_emulator/tests/): the `system` marker.

A test that starts a process or the Kubernetes API emulator is marked `system` (tests/tiers.py reads
its code), so `make test-unit` (`-m "not slow and not system"`) runs the rest, with nothing to mark.
"""
import pytest

from tests.tiers import mark_system_tests


def pytest_collection_modifyitems(config, items):
    mark_system_tests(items, pytest.mark.system)
