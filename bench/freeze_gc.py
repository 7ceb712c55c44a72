"""`python -m bench.freeze_gc`: the open-loop latency of bench.score_load on the real model with
and without SGLang's `POST /freeze_gc` after a warm-up. Each run is a fresh `python -m server`:
warm-up load, then (for "frozen") POST /freeze_gc, then the measured load, the same seeded workload
every time; runs go in pairs whose order alternates (plain, frozen, frozen, plain, ...), so a drift
of the machine's load falls on both. Prints one line per run and the medians' ratio.

  python -m bench.freeze_gc --pairs 2 --rate 3 --duration 40 --num-items 2 --query-tokens 60 \
      --item-tokens 60
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import urllib.request

from bench.score_load import build_parser as load_parser, run as run_load
from bench.server_process import start_server

SERVER_ENV = {"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}


def measure(frozen: bool, load_flags: list[str], warm_up_s: float, server_flags: list[str]) -> dict:
    """One fresh server: warm up, maybe freeze, measure; the measured load's summary."""
    with start_server("server", server_flags, env=SERVER_ENV) as server:
        server.wait_ready(timeout_s=600)
        warm = load_parser().parse_args(["--url", server.url, *load_flags, "--duration",
                                         str(warm_up_s), "--seed", "99"])
        asyncio.run(run_load(warm))
        if frozen:
            request = urllib.request.Request(f"{server.url}/freeze_gc", method="POST")
            with urllib.request.urlopen(request, timeout=30) as response:
                assert response.status == 200
        args = load_parser().parse_args(["--url", server.url, *load_flags])
        return asyncio.run(run_load(args)).to_dict()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--warm-up", type=float, default=10.0, help="seconds of load before")
    parser.add_argument("--server-flags", default="--dtype float32", help="for python -m server")
    args, load_flags = parser.parse_known_args(argv)
    p99: dict[bool, list[float]] = {False: [], True: []}
    for pair in range(args.pairs):
        for frozen in ((False, True) if pair % 2 == 0 else (True, False)):
            summary = measure(frozen, load_flags, args.warm_up, args.server_flags.split())
            p99[frozen].append(summary["latency_p99_ms"])
            print(f"{'frozen' if frozen else 'plain '}: P50 {summary['latency_p50_ms']:.0f} ms, "
                  f"P99 {summary['latency_p99_ms']:.0f} ms, {summary['num_succeeded']}/"
                  f"{summary['num_sent']} ok, {summary['items_per_s']:.2f} items/s", flush=True)
    plain, frozen = statistics.median(p99[False]), statistics.median(p99[True])
    print(f"median P99: plain {plain:.0f} ms, frozen {frozen:.0f} ms; frozen / plain "
          f"{frozen / plain:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
