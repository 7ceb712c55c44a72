"""cache_aware's rule on paper: the real estimate (gateway.finish.earliest) over three simulated
workers, to choose --recompute-charge. No servers, no clock: numbers, no asserts.

  python -m bench.fanout_sim [--charges 0 1 2 3 4 6]

Each worker computes its requests one after another (FIFO) at the same rate; a query costs its
tokens on a worker once while that worker holds it (the gateway's own model, so this shows what
the rule decides, not what a server does). A closed loop keeps `concurrency` requests in flight.
Printed per charge: the fan-out's span and tokens against the ideal (each query once), the hot
query's span on three workers against one, and the sizes workload's span and P99.
"""
from __future__ import annotations

import argparse
import random
import sys

from gateway.affinity import rank
from gateway.finish import Option, Size, earliest

RATE = 1000.0  # tokens/s: spans are in seconds at this rate
Request = tuple[str, float, float]  # (query, query tokens, item tokens)


def simulate(requests: list[Request], concurrency: int, num_workers: int,
             charge: float) -> tuple[float, float, list[float]]:
    """(span s, tokens computed, latencies s) of `requests` through the rule."""
    queues: list[list[list[float]]] = [[] for _ in range(num_workers)]  # [remaining, cost, sent_s]
    holders: dict[str, set[str]] = {}
    now = computed = 0.0
    latencies: list[float] = []
    pending = list(requests)
    while pending or any(queues):
        while pending and sum(map(len, queues)) < concurrency:
            query, query_tokens, item_tokens = pending.pop(0)
            held = holders.setdefault(query, set())
            options = [Option(f"w{i}", sum(r[0] for r in queues[i]), RATE, f"w{i}" in held,
                              rank(query, f"w{i}")) for i in range(num_workers)]
            estimate = earliest(options, Size(query_tokens, item_tokens), charge)
            held.add(estimate.url)
            queues[int(estimate.url[1:])].append([estimate.cost_tokens, estimate.cost_tokens, now])
            computed += estimate.cost_tokens
        step = min(queue[0][0] for queue in queues if queue) / RATE
        now += step
        for queue in queues:
            if queue:
                queue[0][0] -= step * RATE
                if queue[0][0] <= 1e-6:
                    latencies.append(now - queue.pop(0)[2])
    return now, computed, latencies


def fan_out(num_queries: int = 6, per_query: int = 6, item_tokens: float = 800,
            query_tokens: float = 2000, tag: str = "f") -> list[Request]:
    return [(f"{tag}{q}", query_tokens, item_tokens) for q in range(num_queries) for _ in range(per_query)]


def sizes(seed: int = 0) -> list[Request]:
    """The fan-out with 1 to 64 items of 50 tokens a request."""
    rng = random.Random(seed)
    return [(query, tokens, rng.randint(1, 64) * 50.0) for query, tokens, _ in fan_out(tag="s")]


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[round(0.99 * (len(ordered) - 1))]


def row(charge: float) -> str:
    span, tokens, _ = simulate(fan_out(), 18, 3, charge)
    hot = [("hot", 1500.0, 480.0)] * 24
    hot_span, _, _ = simulate(hot, 24, 3, charge)
    one_span, _, _ = simulate(hot, 24, 1, charge)
    sizes_span, _, sizes_latencies = simulate(sizes(), 18, 3, charge)
    return (f"{charge:6g} {span:9.1f} {tokens / (36 * 800 + 6 * 2000):10.2f} {one_span / hot_span:10.2f} "
            f"{sizes_span:9.1f} {p99(sizes_latencies):9.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fanout_sim", description=__doc__.split("\n")[0])
    parser.add_argument("--charges", type=float, nargs="+", default=[0, 1, 2, 3, 4, 6])
    args = parser.parse_args(argv)
    print(f"{'charge':>6} {'fan-out s':>9} {'tok/ideal':>10} {'hot 3 / 1':>10} {'sizes s':>9} {'sizes P99':>9}")
    for charge in args.charges:
        print(row(charge))
    return 0


if __name__ == "__main__":
    sys.exit(main())
