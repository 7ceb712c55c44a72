"""What the fleet gateway adds and what its routing buys, printed as numbers (no asserts).

  python -m bench.gateway [--requests 1500] [--real-requests 8] [--sections overhead real routing]

1. Overhead, a model that costs nothing (bench.free_server): requests/s and P50/P99 latency direct
   vs through `python -m gateway`, at concurrency 1 (latency added) and 16 (what it sustains).
2. The real model (`python -m server`): items/s direct vs through the gateway, same requests.
3. Routing, uneven request sizes (90 % one item, 10 % 64 items, open loop) over three paced
   workers (bench.paced_server: batches take wall time, not CPU): P50/P99 with power_of_two vs
   round_robin, the two gateways over the same workers in the same run.
Everything runs on loopback; client, gateway and servers share this machine's cores.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
from dataclasses import dataclass

from bench.client import run_closed_loop, run_open_loop
from bench.server_process import start_server
from bench.summary import Outcome
from bench.workload import (
    ScoreBody,
    Workload,
    make_bodies,
    percentile,
    poisson_send_times,
)

SMALL = Workload(num_items=4, query_tokens=8, item_tokens=8, label_ids=(9230, 2838))
REAL = Workload(num_items=5, query_tokens=60, item_tokens=60, label_ids=(9230, 2838))
PACE = ["--batch-s", "0.005", "--sequence-s", "0.004"]


@dataclass(frozen=True)
class Run:
    name: str
    num_ok: int
    num_failed: int
    requests_per_s: float
    items_per_s: float
    p50_ms: float
    p99_ms: float


def summarize(name: str, outcomes: list[Outcome]) -> Run:
    ok = [o for o in outcomes if o.status == 200]
    span_s = (max(o.done_s for o in outcomes) - min(o.sent_s for o in outcomes)) if outcomes else 0
    latencies = [o.latency_s * 1000 for o in ok]
    return Run(name, len(ok), len(outcomes) - len(ok), len(ok) / span_s if span_s else 0.0,
               sum(o.num_items for o in ok) / span_s if span_s else 0.0,
               percentile(latencies, 50), percentile(latencies, 99))


def format_runs(title: str, runs: list[Run]) -> str:
    header = (f"{'':34} {'ok':>6} {'failed':>6} {'req/s':>8} {'items/s':>8} "
              f"{'P50 ms':>8} {'P99 ms':>8}")
    lines = [f"== {title}", header]
    lines += [f"{r.name:34} {r.num_ok:6d} {r.num_failed:6d} {r.requests_per_s:8.1f} "
              f"{r.items_per_s:8.2f} {r.p50_ms:8.2f} {r.p99_ms:8.2f}" for r in runs]
    return "\n".join(lines)


def added(direct: Run, through: Run) -> str:
    return (f"gateway adds P50 {through.p50_ms - direct.p50_ms:+.2f} ms, P99 "
            f"{through.p99_ms - direct.p99_ms:+.2f} ms; req/s ratio "
            f"{through.requests_per_s / direct.requests_per_s:.2f}")


async def closed(name: str, url: str, bodies: list[ScoreBody], concurrency: int) -> Run:
    return summarize(name, (await run_closed_loop(url, bodies, concurrency, 120.0)).outcomes)


async def measure_overhead(worker: str, gateway: str, num_requests: int) -> list[Run]:
    """Direct then through the gateway, at concurrency 1 and 16, the same requests each time."""
    bodies = make_bodies(SMALL, num_requests, seed=0)
    runs = []
    for concurrency in (1, 16):
        for name, url in (("direct", worker), ("gateway", gateway)):
            runs.append(await closed(f"{name}, concurrency {concurrency}", url, bodies, concurrency))
    return runs


def uneven_bodies(num_requests: int, seed: int) -> list[ScoreBody]:
    rng = random.Random(seed)
    one, many = (make_bodies(Workload(num_items=n, query_tokens=8, item_tokens=8), num_requests, seed)
                 for n in (1, 64))
    return [many[i] if rng.random() < 0.1 else one[i] for i in range(num_requests)]


async def compare_policies(gateways: dict[str, str], rate_per_s: float, duration_s: float,
                           rounds: int = 2) -> list[Run]:
    """The same open-loop uneven workload through each gateway in turn, `rounds` times
    alternating (so neither policy always runs first, on a cold or a warm machine)."""
    times = poisson_send_times(rate_per_s, duration_s, seed=1)
    bodies = uneven_bodies(len(times), seed=1)
    return [summarize(f"{policy}, round {i + 1}",
                      (await run_open_loop(url, bodies, times, 120.0)).outcomes)
            for i in range(rounds) for policy, url in gateways.items()]


def policy_ratio(runs: list[Run]) -> str:
    """P99 of round_robin over power_of_two, per round (runs as compare_policies orders them)."""
    ratios = [rr.p99_ms / p2.p99_ms for p2, rr in zip(runs[::2], runs[1::2])]
    return "P99 round_robin / power_of_two: " + ", ".join(f"{r:.2f}" for r in ratios)


def gateway_args(worker_urls: list[str], policy: str = "power_of_two") -> list[str]:
    return ["--worker-urls", *worker_urls, "--policy", policy]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway", description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1500, help="per overhead run")
    parser.add_argument("--real-requests", type=int, default=8, help="per real-model run")
    parser.add_argument("--real-rounds", type=int, default=2, help="direct/gateway pairs")
    parser.add_argument("--rate", type=float, default=40.0, help="routing runs, requests/s")
    parser.add_argument("--duration", type=float, default=10.0, help="routing runs, seconds")
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=list(SECTIONS))
    args = parser.parse_args(argv)
    for section in args.sections:
        print(SECTIONS[section](args), flush=True)
    return 0


def overhead(args: argparse.Namespace) -> str:
    with start_server("bench.free_server", []) as free, \
            start_server("gateway", gateway_args([free.url])) as gateway:
        free.wait_ready()
        gateway.wait_ready()
        runs = asyncio.run(measure_overhead(free.url, gateway.url, args.requests))
    return (format_runs("overhead, free model (bench.free_server), one worker", runs) + "\n"
            + added(runs[0], runs[1]) + " (concurrency 1); " + added(runs[2], runs[3]) + " (16)")


def real_model(args: argparse.Namespace) -> str:
    """Direct and through the gateway, alternating for --real-rounds rounds (the load of a shared
    machine drifts: a ratio from neighbouring runs means more than one from far-apart runs)."""
    # a long request timeout: on a shared 2-core machine a busy moment must not turn into 504s
    with start_server("server", ["--request-timeout", "600"]) as server, \
            start_server("gateway", gateway_args([server.url])) as gateway:
        server.wait_ready(timeout_s=600)
        gateway.wait_ready()
        bodies = make_bodies(REAL, args.real_requests, seed=2)
        runs = [asyncio.run(closed(f"{name}, round {i + 1}", url, bodies, 2))
                for i in range(args.real_rounds)
                for name, url in (("direct", server.url), ("gateway", gateway.url))]
    ratios = [g.items_per_s / d.items_per_s for d, g in zip(runs[::2], runs[1::2]) if d.items_per_s]
    return (format_runs("real model (SmolLM2-135M), one worker, concurrency 2", runs)
            + "\nitems/s through the gateway / direct: " + ", ".join(f"{r:.3f}" for r in ratios))


def routing(args: argparse.Namespace) -> str:
    rate_per_s, duration_s = args.rate, args.duration
    with contextlib.ExitStack() as stack:
        workers = [stack.enter_context(start_server("bench.paced_server", PACE)) for _ in range(3)]
        for worker in workers:
            worker.wait_ready()
        urls = [w.url for w in workers]
        gateways = {policy: stack.enter_context(start_server("gateway", gateway_args(urls, policy)))
                    for policy in ("power_of_two", "round_robin")}
        for gateway in gateways.values():
            gateway.wait_ready()
        runs = asyncio.run(compare_policies({p: g.url for p, g in gateways.items()},
                                            rate_per_s, duration_s))
    return (format_runs(f"routing, 3 paced workers ({' '.join(PACE)}), 90 % 1 item / 10 % 64 "
                        f"items, open loop {rate_per_s:g} req/s for {duration_s:g} s", runs)
            + "\n" + policy_ratio(runs))


SECTIONS = {"overhead": overhead, "real": real_model, "routing": routing}

if __name__ == "__main__":
    sys.exit(main())
