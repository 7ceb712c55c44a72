"""Sizing torch's thread pool from the affinity mask and the cgroup CPU quota."""
import pytest

from server.cpus import detect_usable_cpus, usable_cpus


@pytest.mark.parametrize("affine, cpu_max, expected", [
    pytest.param(8, None, 8, id="no-cgroup-file"),
    pytest.param(8, "max 100000\n", 8, id="no-quota"),
    pytest.param(64, "400000 100000\n", 4, id="pod-limit-4-on-a-64-core-node"),
    pytest.param(64, "150000 100000", 2, id="fractional-quota-rounds-up"),
    pytest.param(2, "800000 100000", 2, id="affinity-below-quota"),
    pytest.param(4, "50000 100000", 1, id="half-a-cpu-is-one-thread"),
    pytest.param(4, "garbage", 4, id="unreadable-text-ignored"),
    pytest.param(4, "-1 100000", 4, id="negative-quota-ignored"),
])
def test_usable_cpus(affine, cpu_max, expected):
    assert usable_cpus(affine, cpu_max) == expected


def test_detect_usable_cpus_on_this_machine_is_at_least_one():
    assert detect_usable_cpus() >= 1
