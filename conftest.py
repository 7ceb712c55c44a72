"""pytest's hooks for every test folder (tests/ and kube_emulator/tests/): the `system` marker.

A test that starts a process or the Kubernetes API emulator is marked `system` (tests/tiers.py reads
its code), so `make test-unit` (`-m "not slow and not system"`) runs the rest, with nothing to mark.
"""
import os

import pytest

from tests.tiers import mark_system_tests

# NOTE: `python -m server` compiles by default on CPUs with native bf16 (--compile auto): minutes
# per start on a tiny model's first run. The servers the tests start inherit this (their tests are
# about serving, not compiling); the compile's own tests pass --compile or clear it.
os.environ.setdefault("SCORINGFLEET_COMPILE", "off")


def pytest_collection_modifyitems(config, items):
    mark_system_tests(items, pytest.mark.system)
