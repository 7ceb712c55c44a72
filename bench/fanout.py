"""Fan-out scoring: one query computed once per fleet, not once per request. Numbers, no asserts.

  python -m bench.fanout [--sections single fleet] [--queries 6] [--requests-per-query 6]
                         [--items 16] [--query-tokens 2000] [--item-tokens 50] [--rounds 1]
                         [--workloads fan-out mixed sizes] [--max-items 64]
                         [--hot-requests 24] [--hot-items 12] [--hot-item-tokens 40]
                         [--hot-query-tokens 1500]

single: one server (`python -m server`), the fan-out workload (bench.fanout_workload: each query's
  requests sent together, concurrency = requests per query) against the same token counts with
  every request's query distinct: items/s, P50/P99, the server's `sglang:cached_tokens_total`, and
  the share of repeated query tokens it did not compute (from `sglang:computed_tokens_total`).
fleet: three servers (the machine's CPUs split among them, unless --server-args names
  --num-threads) behind two gateways over the same servers (`--policy cache_aware` and
  `power_of_two`), on the fan-out, the mixed workload (half fan-out, half distinct) and the sizes
  workload (the fan-out with 1 to --max-items items a request), concurrency 3 x requests per query:
  the same, plus each worker's share of the requests and the gateway's affinity counters
  (hit/new/spill). Every run draws queries no server has seen. Then one hot query: --hot-requests
  concurrent requests with one query through the cache_aware gateway, how many workers served it,
  and its items/s against the same (a new query) sent straight to one server.
Everything runs on loopback; client, gateway and servers share this machine's cores.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import shlex
import sys
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.client import run_closed_loop
from bench.fanout_workload import (
    FanOut,
    distinct_bodies,
    fanout_bodies,
    mixed_bodies,
    query_hit_share,
    shares,
    sized_bodies,
)
from bench.server_process import start_server
from bench.workload import ScoreBody, percentile
from server.cpus import detect_usable_cpus

TIMEOUT_S = 600.0
WORKLOADS = {"fan-out": fanout_bodies, "distinct": distinct_bodies, "mixed": mixed_bodies,
             "sizes": sized_bodies}
FLEET_WORKLOADS = ("fan-out", "mixed", "sizes")
SERVER_COUNTERS = ("sglang:computed_tokens", "sglang:padding_tokens", "sglang:cached_tokens")
G = "scoringfleet_gateway"


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """/metrics as {(sample name, sorted labels): value}, parsed by prometheus_client."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def server_counters(urls: list[str]) -> dict[str, float]:
    """SERVER_COUNTERS summed over the servers (0 for a counter a server lacks)."""
    totals = dict.fromkeys(SERVER_COUNTERS, 0.0)
    for url in urls:
        for (name, _), value in scrape(url).items():
            if name.endswith("_total") and name.removesuffix("_total") in totals:
                totals[name.removesuffix("_total")] += value
    return totals


def worker_rates(url: str) -> str:
    """The gateway's learned tokens/s of each worker it has had an answer from, in URL order (the
    per-worker shares' order)."""
    rates = {labels[0][1]: value for (name, labels), value in scrape(url).items()
             if name == f"{G}_worker_rate_tokens_per_second"}
    return "/".join(f"{rates[worker]:.0f}" for worker in sorted(rates)) or "-"


def gateway_counters(url: str | None) -> dict[str, float]:
    """The gateway's routed-by-worker and affinity-by-outcome counters, as 'routed <url>' and
    'affinity <outcome>'."""
    if url is None:
        return {}
    found = {}
    for (name, labels), value in scrape(url).items():
        if name in (f"{G}_routed_total", f"{G}_affinity_total"):
            found[f"{name.split('_')[-2]} {labels[0][1]}"] = value
    return found


@dataclass(frozen=True)
class Measured:
    name: str
    num_ok: int
    num_failed: int
    items_per_s: float
    p50_ms: float
    p99_ms: float
    num_cached_tokens: float
    hit_share: float | None  # of the repeated query tokens, not computed by any server
    worker_shares: dict[str, float] = field(default_factory=dict)  # of the requests, by worker
    affinity: dict[str, float] = field(default_factory=dict)       # gateway outcome -> count


async def measure(name: str, url: str, bodies: list[ScoreBody], concurrency: int,
                  servers: list[str], gateway: str | None = None) -> Measured:
    """Send every body once through `url`, `concurrency` in flight, in order; the counters of
    `servers` (and `gateway`) before and after."""
    before, routed_before = server_counters(servers), gateway_counters(gateway)
    outcomes = (await run_closed_loop(url, bodies, concurrency, TIMEOUT_S)).outcomes
    after, routed_after = server_counters(servers), gateway_counters(gateway)
    delta = {key: after[key] - before[key] for key in after}
    routed = {key: value - routed_before.get(key, 0.0) for key, value in routed_after.items()}
    ok = [o for o in outcomes if o.status == 200]
    span_s = max(o.done_s for o in outcomes) - min(o.sent_s for o in outcomes)
    latencies = [o.latency_s * 1000 for o in ok]
    real = delta["sglang:computed_tokens"] - delta["sglang:padding_tokens"]
    return Measured(
        name, len(ok), len(outcomes) - len(ok),
        sum(o.num_items for o in ok) / span_s if span_s > 0 else 0.0,
        percentile(latencies, 50), percentile(latencies, 99), delta["sglang:cached_tokens"],
        query_hit_share(bodies, real),
        shares({k.split(" ", 1)[1]: v for k, v in routed.items() if k.startswith("routed ")}),
        {k.split(" ", 1)[1]: v for k, v in routed.items() if k.startswith("affinity ") and v})


def format_table(title: str, runs: list[Measured]) -> str:
    header = (f"{'':28} {'ok':>4} {'fail':>4} {'items/s':>8} {'P50 ms':>8} {'P99 ms':>8} "
              f"{'cached tok':>10} {'hit share':>9}  per-worker share / affinity")
    lines = [f"== {title}", header]
    for run in runs:
        hit = f"{run.hit_share:9.2f}" if run.hit_share is not None else f"{'-':>9}"
        workers = "/".join(f"{share:.2f}" for _, share in sorted(run.worker_shares.items()))
        affinity = " ".join(f"{k} {v:g}" for k, v in sorted(run.affinity.items()))
        lines.append(f"{run.name:28} {run.num_ok:4d} {run.num_failed:4d} {run.items_per_s:8.2f} "
                     f"{run.p50_ms:8.0f} {run.p99_ms:8.0f} {run.num_cached_tokens:10.0f} {hit}  "
                     f"{workers} {affinity}".rstrip())
    return "\n".join(lines)


def ratios(runs: list[Measured], numerator: str, denominator: str) -> list[float]:
    """items/s of each run named `<numerator>...` over the run before or after it named
    `<denominator>...`, pairing them in order."""
    tops = [r for r in runs if r.name.startswith(numerator)]
    bottoms = [r for r in runs if r.name.startswith(denominator)]
    return [t.items_per_s / b.items_per_s for t, b in zip(tops, bottoms) if b.items_per_s]


async def single_runs(url: str, shape: FanOut, rounds: int) -> list[Measured]:
    """Fan-out and distinct on one server, alternating which goes first, fresh queries each run."""
    runs = []
    for i in range(rounds):
        order = ("fan-out", "distinct") if i % 2 == 0 else ("distinct", "fan-out")
        for k, kind in enumerate(order):
            bodies = WORKLOADS[kind](shape, seed=1000 * i + 10 * k)
            runs.append(await measure(f"{kind}, round {i + 1}", url, bodies,
                                      shape.requests_per_query, [url]))
    return runs


async def fleet_runs(gateways: dict[str, str], servers: list[str], shape: FanOut, rounds: int,
                     kinds: list[str], max_items: int) -> list[Measured]:
    """Each workload through each policy's gateway, alternating which policy goes first."""
    runs = []
    for i in range(rounds):
        for w, kind in enumerate(kinds):
            policies = list(gateways) if i % 2 == 0 else list(gateways)[::-1]
            for p, policy in enumerate(policies):
                seed = 5000 + 1000 * i + 100 * w + 10 * p
                bodies = (sized_bodies(shape, seed, max_items) if kind == "sizes"
                          else WORKLOADS[kind](shape, seed=seed))
                runs.append(await measure(f"{policy} {kind}, round {i + 1}", gateways[policy],
                                          bodies, len(servers) * shape.requests_per_query,
                                          servers, gateways[policy]))
    return runs


async def hot_runs(gateway: str, servers: list[str], hot: FanOut, rounds: int = 1) -> list[Measured]:
    """One query sent as its requests, all at once, through the cache_aware gateway, and another
    (never seen) straight to one server (the single-worker figure); each round a new query, the
    two alternating which goes first (on a shared machine the load drifts between two runs)."""
    n, runs = hot.requests_per_query, []
    for i in range(rounds):
        pair = [(f"cache_aware hot query x{n}, round {i + 1}", gateway, servers, gateway),
                (f"one worker hot query x{n}, round {i + 1}", servers[0], servers[:1], None)]
        for k, (name, url, counted, routed) in enumerate(pair if i % 2 == 0 else pair[::-1]):
            runs.append(await measure(name, url, fanout_bodies(hot, seed=9000 + 100 * i + 10 * k), n,
                                      counted, routed))
    return runs


def ratio_line(label: str, values: list[float]) -> str:
    return f"{label}: " + (", ".join(f"{v:.2f}" for v in values) or "-")


def single(args: argparse.Namespace, shape: FanOut) -> str:
    with start_server("server", ["--request-timeout", "600", *args.server_args]) as server:
        server.wait_ready(timeout_s=600)
        runs = asyncio.run(single_runs(server.url, shape, args.rounds))
    return (format_table(f"one server, {describe(shape)}", runs) + "\n"
            + ratio_line("items/s fan-out / distinct", ratios(runs, "fan-out", "distinct")))


def fleet_server_args(server_args: list[str], num_cpus: int, num_servers: int = 3) -> list[str]:
    """The servers' flags: unless they name their threads, the machine's CPUs split among them, as
    three pods would each have their own (three servers of torch's default would each take every
    core: threads oversubscribed 3x, measuring contention instead of routing)."""
    if "--num-threads" in server_args:
        return server_args
    return [*server_args, "--num-threads", str(max(num_cpus // num_servers, 1))]


def fleet(args: argparse.Namespace, shape: FanOut) -> str:
    server_args = ["--request-timeout", "600",
                   *fleet_server_args(args.server_args, detect_usable_cpus())]
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(start_server("server", server_args)) for _ in range(3)]
        for server in servers:
            server.wait_ready(timeout_s=600)
        urls = [s.url for s in servers]
        gateways = {policy: stack.enter_context(start_server(
            "gateway", ["--worker-urls", *urls, "--policy", policy, "--request-timeout", "600"]))
            for policy in ("cache_aware", "power_of_two")}
        for gateway in gateways.values():
            gateway.wait_ready(path="/health")
        runs = asyncio.run(fleet_runs({p: g.url for p, g in gateways.items()}, urls, shape,
                                      args.rounds, args.workloads, args.max_items))
        rates = worker_rates(gateways["cache_aware"].url)  # what the hot query's choices start from
        hot = (asyncio.run(hot_runs(gateways["cache_aware"].url, urls, hot_shape(args), args.rounds))
               if args.hot_requests else [])
    lines = [format_table(f"three servers behind the gateway ({' '.join(server_args[2:])}), "
                          f"{describe(shape)}; sizes: 1-{args.max_items} items; hot: "
                          f"{describe(hot_shape(args))}", runs + hot)]
    for kind in args.workloads:
        kind_runs = [r for r in runs if f" {kind}," in r.name]
        lines.append(ratio_line(f"items/s cache_aware / power_of_two, {kind}",
                                ratios(kind_runs, "cache_aware", "power_of_two")))
        lines.append(ratio_line(f"P99 cache_aware / power_of_two, {kind}",
                                p99_ratios(kind_runs, "cache_aware", "power_of_two")))
    if hot:
        fleet_hot = [r for r in hot if r.name.startswith("cache_aware")]
        served = [sum(1 for share in r.worker_shares.values() if share > 0) for r in fleet_hot]
        lines.append(f"hot query: {sum(r.num_ok for r in fleet_hot)} of {len(fleet_hot) * args.hot_requests} "
                     f"requests answered, served by {'/'.join(map(str, served))} of {len(servers)} workers; "
                     f"cache_aware's learned rates before it: {rates} tokens/s")
        lines.append(ratio_line("items/s cache_aware hot / one worker", ratios(hot, "cache_aware", "one worker")))
    return "\n".join(lines)


def hot_shape(args: argparse.Namespace) -> FanOut:
    return FanOut(1, max(args.hot_requests, 1), args.hot_items, args.hot_query_tokens,
                  args.hot_item_tokens)


def p99_ratios(runs: list[Measured], numerator: str, denominator: str) -> list[float]:
    """P99 of each run named `<numerator>...` over its `<denominator>...` partner (below 1: better)."""
    tops = [r for r in runs if r.name.startswith(numerator)]
    bottoms = [r for r in runs if r.name.startswith(denominator)]
    return [t.p99_ms / b.p99_ms for t, b in zip(tops, bottoms) if b.p99_ms]


def describe(shape: FanOut) -> str:
    return (f"{shape.num_queries} queries of {shape.query_tokens} tokens x "
            f"{shape.requests_per_query} requests of {shape.num_items} items of "
            f"{shape.item_tokens} tokens")


SECTIONS = {"single": single, "fleet": fleet}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fanout", description=__doc__.split("\n")[0])
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=list(SECTIONS))
    parser.add_argument("--queries", type=int, default=6, help="distinct fan-out queries per run")
    parser.add_argument("--requests-per-query", type=int, default=6)
    parser.add_argument("--items", type=int, default=16, help="items per request")
    parser.add_argument("--query-tokens", type=int, default=2000)
    parser.add_argument("--item-tokens", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=1, help="runs of each comparison, alternating")
    parser.add_argument("--workloads", nargs="*", default=list(FLEET_WORKLOADS), choices=FLEET_WORKLOADS,
                        help="fleet: the workloads run through both gateways (none: the hot query only)")
    parser.add_argument("--max-items", type=int, default=64, help="sizes: items per request 1..this")
    parser.add_argument("--hot-requests", type=int, default=24,
                        help="fleet: concurrent requests of one hot query after the runs (0: none)")
    parser.add_argument("--hot-items", type=int, default=12, help="hot query: items per request")
    parser.add_argument("--hot-item-tokens", type=int, default=40)
    parser.add_argument("--hot-query-tokens", type=int, default=1500)
    parser.add_argument("--server-args", type=shlex.split, default=[],
                        help="extra flags for every `python -m server`, one quoted string")
    args = parser.parse_args(argv)
    shape = FanOut(args.queries, args.requests_per_query, args.items, args.query_tokens,
                   args.item_tokens)
    for section in args.sections:
        print(SECTIONS[section](args, shape), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
