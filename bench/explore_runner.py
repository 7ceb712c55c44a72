"""`python -m bench.explore_runner`: the knobs of the offline path, side by side in one process,
interleaved, medians of repeats: torch threads, requests per forward batch, dtype, padding of mixed
item lengths, and where one request's time goes (query forward / batch cache / items forward).
Feeds the proposals for server/model_runner.py in docs/performance.md; prints numbers only.
"""
from __future__ import annotations

import argparse
import random
import sys
import time

import torch

from bench import offline
from bench.compare import progress
from bench.workload import ScoreBody, Workload, make_bodies, median
from server.sequence import Request, ScoringOptions


def requests_of(bodies: list[ScoreBody]) -> list[Request]:
    return [Request.create(b.query, list(b.items), ScoringOptions(b.label_token_ids, False))
            for b in bodies]


def items_per_s(runner, bodies: list[ScoreBody], per_batch: int, buckets: int = 1) -> float:
    """Run the bodies `per_batch` requests to a forward batch (the scheduler's batching); with
    buckets > 1, each batch's sequences sorted by length and run as that many smaller batches."""
    requests = requests_of(bodies)
    start = time.perf_counter()
    for i in range(0, len(requests), per_batch):
        batch = sorted((seq for r in requests[i:i + per_batch] for seq in r.sequences),
                       key=lambda seq: len(seq.own_ids))
        size = -(-len(batch) // buckets)
        for j in range(0, len(batch), size):
            runner.run(batch[j:j + size])
        runner.keep_only(())
    return sum(len(r.sequences) for r in requests) / (time.perf_counter() - start)


def phases_s(runner, body: ScoreBody) -> tuple[float, float, float]:
    """Seconds of (query forward, building the batch cache, the whole items forward incl. the
    cache build) for one request."""
    request = requests_of([body])[0]
    with torch.inference_mode():
        t0 = time.perf_counter()
        runner._prefix_cache[request.rid] = runner._compute_prefix(request.prefix_ids)
        t1 = time.perf_counter()
        runner._batch_cache(request.sequences)
        t2 = time.perf_counter()
        runner._last_token_logits(request.sequences)
        t3 = time.perf_counter()
    runner.keep_only(())
    return t1 - t0, t2 - t1, t3 - t2


def profile_table(runner, bodies: list[ScoreBody]) -> str:
    """torch.profiler's self-CPU-time table of ModelRunner.run (bodies[0] only warms up)."""
    from torch.profiler import ProfilerActivity, profile

    offline.runner_scores(runner, bodies[0])
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for body in bodies[1:]:
            offline.runner_scores(runner, body)
    return profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)


def mixed_lengths(body: ScoreBody, seed: int) -> ScoreBody:
    """The same request with item lengths spread uniformly over 20..len(item)."""
    rng = random.Random(seed)
    return ScoreBody(body.query, tuple(item[:rng.randint(20, len(item))] for item in body.items),
                     body.label_token_ids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.explore_runner", description=__doc__)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--requests", type=int, default=4, help="requests per measurement")
    parser.add_argument("--profile", action="store_true",
                        help="only print torch.profiler's operators for 2 float32 requests")
    args = parser.parse_args(argv)
    f32 = offline.load_runner(torch.float32)
    if args.profile:
        print(profile_table(f32, make_bodies(Workload(), 3, seed=5)))
        return 0
    bf16 = offline.with_dtype(f32, torch.bfloat16)
    bodies = make_bodies(Workload(), 1 + args.repeats * args.requests, seed=11)
    offline.runner_scores(f32, bodies[0])
    offline.runner_scores(bf16, bodies[0])
    threads = torch.get_num_threads()
    t = threads
    configs = {  # name -> (runner, threads, requests per batch, mixed lengths, length buckets)
        f"float32, {t} threads, 1 request/batch": (f32, t, 1, False, 1),
        "float32, 1 thread, 1 request/batch": (f32, 1, 1, False, 1),
        f"float32, {t} threads, 2 requests/batch": (f32, t, 2, False, 1),
        f"float32, {t} threads, 4 requests/batch": (f32, t, 4, False, 1),
        f"bfloat16, {t} threads, 1 request/batch": (bf16, t, 1, False, 1),
        f"bfloat16, {t} threads, 4 requests/batch": (bf16, t, 4, False, 1),
        f"float32, {t} threads, items of 20..180 tokens, 1 request/batch (padded to the longest)":
            (f32, t, 1, True, 1),
        f"float32, {t} threads, items of 20..180 tokens, sorted into 2 batches by length":
            (f32, t, 1, True, 2),
    }
    runs: dict[str, list[float]] = {name: [] for name in configs}
    for repeat in range(args.repeats):
        work = bodies[1 + repeat * args.requests:1 + (repeat + 1) * args.requests]
        for name, (runner, num_threads, per_batch, mixed, buckets) in configs.items():
            torch.set_num_threads(num_threads)
            shaped = [mixed_lengths(b, i) for i, b in enumerate(work)] if mixed else work
            runs[name].append(items_per_s(runner, shaped, per_batch, buckets))
            progress(f"repeat {repeat + 1}: {name}: {runs[name][-1]:.2f} items/s")
    torch.set_num_threads(threads)
    print("| configuration of ModelRunner.run | items/s (median) | runs |\n|---|---|---|")
    for name, values in runs.items():
        print(f"| {name} | {median(values):.2f} | {', '.join(f'{v:.2f}' for v in values)} |")
    # One thread: a 2-thread phase split is dominated by whoever else shares the cores.
    torch.set_num_threads(1)
    for runner, dtype in ((f32, "float32"), (bf16, "bfloat16")):
        split = [phases_s(runner, body) for body in bodies[1:4]]
        prefix, cache, items = (median([s[i] for s in split]) for i in range(3))
        total = prefix + items
        print(f"- {dtype}, 1 thread, one request (Q=120, 10 x I=180): query forward {prefix:.3f} s "
              f"({prefix / total:.0%}), items forward {items:.3f} s ({items / total:.0%}), of "
              f"which building the batch cache {cache:.4f} s ({cache / total:.1%})")
    torch.set_num_threads(threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
