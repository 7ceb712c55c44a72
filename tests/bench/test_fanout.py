"""bench.fanout on tiny sizes: the workloads (pure), and the single-server and fleet runs end to
end over in-process servers whose runner keeps every query it has computed (a perfect query
cache, counted in the server's own counters) behind real `python -m gateway` processes. Timings
are printed, never checked; the token arithmetic is."""
from __future__ import annotations

import asyncio
import contextlib
import threading

from bench.fanout import (
    fleet_runs,
    fleet_server_args,
    format_table,
    hot_runs,
    p99_ratios,
    ratios,
    single_runs,
    worker_rates,
)
from bench.fanout_workload import (
    FanOut,
    distinct_bodies,
    fanout_bodies,
    item_tokens,
    mixed_bodies,
    query_hit_share,
    query_tokens,
    repeated_query_tokens,
    sized_bodies,
)
from bench.server_process import start_server
from server.sequence import RunResult, requests_of
from server.special_tokens import NO_SPECIAL_TOKENS
from tests.kit.servers import serving

TINY = FanOut(num_queries=3, requests_per_query=4, num_items=3, query_tokens=30, item_tokens=5)


class CachingRunner:
    """Costs nothing; computes (counts) a query the first time this server sees it, every item."""

    vocab_size = 49152
    max_context_tokens = 8192
    shares_query_in_forward = False
    special_tokens = NO_SPECIAL_TOKENS

    def __init__(self) -> None:
        self.seen: set[tuple[int, ...]] = set()
        self.lock = threading.Lock()

    def tokenize(self, text: str) -> list[int]:
        return [ord(ch) for ch in text]

    def run(self, sequences) -> RunResult:
        with self.lock:
            new = {tuple(r.prefix_ids) for r in requests_of(sequences)} - self.seen
            self.seen |= new
        num_prefix = sum(len(seq.request.prefix_ids) for seq in sequences)
        num_computed = sum(map(len, new)) + sum(len(seq.own_ids) for seq in sequences)
        scores = [[0.5] * len(seq.request.options.label_token_ids) for seq in sequences]
        return RunResult(scores, num_prefix - sum(map(len, new)), num_computed, 0)

    def keep_only(self, live_request_ids) -> None:
        pass


def test_fanout_bodies_repeat_each_query_for_its_requests():
    bodies = fanout_bodies(TINY, seed=1)
    assert len(bodies) == 12 and len({b.query for b in bodies}) == 3
    assert [b.query for b in bodies[:4]] == [bodies[0].query] * 4  # query by query
    assert len({b.items for b in bodies}) == 12                    # every request its own items
    assert repeated_query_tokens(bodies) == 9 * 30 and query_tokens(bodies) == 12 * 30


def test_distinct_and_mixed_bodies_keep_the_token_counts():
    fanned, distinct = fanout_bodies(TINY, 1), distinct_bodies(TINY, 1)
    assert item_tokens(distinct) == item_tokens(fanned) and query_tokens(distinct) == query_tokens(fanned)
    assert repeated_query_tokens(distinct) == 0
    mixed = mixed_bodies(FanOut(num_queries=2, requests_per_query=4, query_tokens=30), seed=1)
    assert len(mixed) == 8 and repeated_query_tokens(mixed) == 3 * 30  # one query fans out: 3 repeats
    assert len({b.query for b in mixed[1::2]}) == 4                     # the other half distinct


def test_sized_bodies_are_the_fan_out_with_1_to_max_items_a_request():
    sized, fanned = sized_bodies(TINY, seed=1, max_items=8), fanout_bodies(TINY, seed=1)
    assert [b.query for b in sized] == [b.query for b in fanned]  # the same queries, in order
    counts = [len(b.items) for b in sized]
    assert all(1 <= n <= 8 for n in counts) and len(set(counts)) > 1
    assert sized == sized_bodies(TINY, seed=1, max_items=8)       # seeded


def test_query_hit_share_from_the_computed_tokens():
    bodies = fanout_bodies(TINY, seed=1)
    every_query_once = item_tokens(bodies) + 3 * 30
    assert query_hit_share(bodies, every_query_once) == 1.0
    assert query_hit_share(bodies, every_query_once + 9 * 30) == 0.0  # computed per request
    assert query_hit_share(bodies, 0) is None                         # a server that counts nothing


def test_single_server_run_counts_the_shared_query(capsys):
    with serving(CachingRunner()) as (url, _):
        runs = asyncio.run(single_runs(url, TINY, rounds=2))
    assert [r.name for r in runs] == ["fan-out, round 1", "distinct, round 1",
                                      "distinct, round 2", "fan-out, round 2"]
    assert all(r.num_ok == 12 and r.num_failed == 0 for r in runs)
    fan, distinct = runs[0], runs[1]
    assert fan.hit_share == 1.0 and distinct.hit_share is None  # nothing repeats in distinct
    assert fan.num_cached_tokens >= 9 * 30
    assert len(ratios(runs, "fan-out", "distinct")) == 2
    print(format_table("tiny", runs))
    assert "fan-out, round 1" in capsys.readouterr().out


def test_fleet_runs_compare_the_policies_over_three_servers():
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(serving(CachingRunner()))[0] for _ in range(3)]
        gateways = {policy: stack.enter_context(start_server(
            "gateway", ["--worker-urls", *servers, "--policy", policy]))
            for policy in ("cache_aware", "power_of_two")}
        for gateway in gateways.values():
            gateway.wait_ready(timeout_s=30, path="/ready")
        runs = asyncio.run(fleet_runs({p: g.url for p, g in gateways.items()}, servers, TINY, 1,
                                      ["fan-out", "mixed", "sizes"], 5))
        rates = worker_rates(gateways["cache_aware"].url)
        hot, one, one_again, hot_again = asyncio.run(hot_runs(gateways["cache_aware"].url, servers,
                                                              FanOut(1, 24, 3, 30, 5), rounds=2))
    assert len(rates.split("/")) == 3 and all(float(rate) > 0 for rate in rates.split("/"))
    assert [r.name for r in runs] == ["cache_aware fan-out, round 1", "power_of_two fan-out, round 1",
                                      "cache_aware mixed, round 1", "power_of_two mixed, round 1",
                                      "cache_aware sizes, round 1", "power_of_two sizes, round 1"]
    assert all(r.num_failed == 0 and r.hit_share is not None for r in runs)
    cache_aware = runs[0]
    # all 12 sent before any answer (every worker at the default rate): 4 requests of 45 tokens a
    # query never queue past a copy's 30 + 3 x 30 charge
    assert cache_aware.hit_share == 1.0
    assert cache_aware.affinity == {"new": 3, "hit": 9}
    assert len(p99_ratios(runs, "cache_aware", "power_of_two")) == 3
    assert abs(sum(cache_aware.worker_shares.values()) - 1) < 1e-9  # workers that got none: absent
    assert "spill" not in runs[1].affinity and runs[1].affinity == {}  # power_of_two counts none
    # the hot query's spread needs requests that pile up (tests/gateway/test_cache_aware_e2e.py);
    # these cost nothing, so only the counting is checked here
    assert hot.name == "cache_aware hot query x24, round 1" and hot.num_ok == 24
    assert sum(hot.affinity.values()) == 24
    assert one.name == "one worker hot query x24, round 1" and one.num_ok == 24 and one.hit_share == 1.0
    # round 2 alternates: the single worker first
    assert (one_again.name, hot_again.name) == ("one worker hot query x24, round 2",
                                                "cache_aware hot query x24, round 2")


def test_the_fleets_servers_split_the_machines_cpus_unless_told():
    assert fleet_server_args([], num_cpus=2) == ["--num-threads", "1"]
    assert fleet_server_args(["--dtype", "float32"], num_cpus=12) == ["--dtype", "float32",
                                                                     "--num-threads", "4"]
    assert fleet_server_args(["--num-threads", "2"], num_cpus=2) == ["--num-threads", "2"]
