"""bench.gateway runs end to end on tiny sizes and prints its tables (timings are not checked):
the measuring functions over in-process free servers and real `python -m gateway` processes."""
import asyncio

from bench.free_server import FreeRunner
from bench.gateway import (
    compare_policies,
    format_runs,
    gateway_args,
    measure_overhead,
    policy_ratio,
    uneven_bodies,
)
from bench.server_process import start_server
from tests.kit.servers import serving


def test_uneven_bodies_mix_one_and_64_items():
    sizes = [len(body.items) for body in uneven_bodies(200, seed=1)]
    assert set(sizes) == {1, 64} and 5 < sizes.count(64) < 40


def test_overhead_and_policy_runs_print_numbers(free_url):
    with serving(FreeRunner()) as (second, _), \
            start_server("gateway", gateway_args([free_url, second])) as p2, \
            start_server("gateway", gateway_args([free_url, second], "round_robin")) as rr:
        p2.wait_ready(timeout_s=30)
        rr.wait_ready(timeout_s=30)
        overhead = asyncio.run(measure_overhead(free_url, p2.url, num_requests=20))
        policies = asyncio.run(compare_policies({"power_of_two": p2.url, "round_robin": rr.url},
                                                rate_per_s=20, duration_s=1.0, rounds=1))
    assert [run.num_ok for run in overhead] == [20] * 4
    assert all(run.num_ok > 0 and run.num_failed == 0 for run in policies)
    table = format_runs("overhead", overhead)
    assert "gateway, concurrency 16" in table and "P99 ms" in table
    assert policy_ratio(policies).startswith("P99 round_robin / power_of_two: ")
