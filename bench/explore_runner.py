"""`python -m bench.explore_runner`: the knobs of the offline path, side by side in one process,
interleaved, medians of repeats: torch threads, requests per forward batch, dtype, the padding a
mixed-length batch may carry per forward (ModelRunner's max_padding_fraction), and where one
request's time goes (query forward / batch cache / items forward).
Feeds the proposals for server/model_runner.py in docs/performance.md; prints numbers only.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from bench import offline
from bench.compare import progress
from bench.workload import MIXED, ScoreBody, Workload, make_bodies, median, num_tokens
from server.batch_cache import batch_cache
from server.model_runner import ModelRunner
from server.sequence import Request, ScoringOptions


def requests_of(bodies: list[ScoreBody]) -> list[Request]:
    return [Request.create(b.query, list(b.items), ScoringOptions(b.label_token_ids, False))
            for b in bodies]


def items_per_s(runner, bodies: list[ScoreBody], per_batch: int) -> float:
    """Run the bodies `per_batch` requests to a forward batch (the scheduler's batching)."""
    requests = requests_of(bodies)
    start = time.perf_counter()
    for i in range(0, len(requests), per_batch):
        runner.run([seq for r in requests[i:i + per_batch] for seq in r.sequences])
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
        batch_cache(request.sequences, runner._prefix_cache, runner.device)
        t2 = time.perf_counter()
        runner._last_token_states(request.sequences)
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


def with_padding(runner: ModelRunner, max_padding_fraction: float) -> ModelRunner:
    """The same weights, another batch layout."""
    return ModelRunner(runner.model, runner.tokenizer, runner.device, max_padding_fraction)


def masked(runner: ModelRunner) -> ModelRunner:
    """The same weights, every forward over the padded cache with masks (no cascade attention)."""
    other = ModelRunner(runner.model, runner.tokenizer, runner.device, runner.max_padding_fraction)
    other.use_cascade = False
    return other


def capped(runner: ModelRunner, max_forward_tokens: int | None) -> ModelRunner:
    """The same weights, forwards of at most `max_forward_tokens` item tokens (None: no cap)."""
    other = ModelRunner(runner.model, runner.tokenizer, runner.device, runner.max_padding_fraction)
    other.max_forward_tokens = max_forward_tokens
    return other


def build_configs(f32: ModelRunner, bf16: ModelRunner, t: int) -> dict:
    """name -> (runner, threads, requests per batch, mixed lengths)."""
    return {
        **{f"float32, {t} threads, {n} request{'s' * (n > 1)}/batch{layout}": (runner, t, n, False)
           for n in (1, 2, 4) for layout, runner in (("", f32), (", masked layout", masked(f32)))},
        **{f"float32, {t} threads, 4 requests/batch, forwards <= {cap} item tokens": (capped(f32, cap), t, 4, False)
           for cap in (None, 1024, 4096)},
        "float32, 1 thread, 1 request/batch": (f32, 1, 1, False),
        f"bfloat16, {t} threads, 1 request/batch": (bf16, t, 1, False),
        **{f"float32, {t} threads, mixed lengths, 1 request/batch, <= {f:.0%} padding per forward":
           (with_padding(f32, f), t, 1, True) for f in (1.0, 0.15, 0.05, 0.0)},
        f"float32, {t} threads, mixed lengths, 4 requests/batch, <= 5% padding per forward":
            (f32, t, 4, True),
    }


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
    mixed = make_bodies(MIXED, args.repeats * args.requests, seed=12)
    offline.runner_scores(f32, bodies[0])
    offline.runner_scores(bf16, bodies[0])
    threads = torch.get_num_threads()
    configs = build_configs(f32, bf16, threads)
    runs: dict[str, list[float]] = {name: [] for name in configs}
    for repeat in range(args.repeats):
        work = bodies[1 + repeat * args.requests:1 + (repeat + 1) * args.requests]
        mixed_work = mixed[repeat * args.requests:(repeat + 1) * args.requests]
        for name, (runner, num_threads, per_batch, is_mixed) in configs.items():
            torch.set_num_threads(num_threads)
            shaped = mixed_work if is_mixed else work
            rate = items_per_s(runner, shaped, per_batch)
            runs[name].append(rate * sum(map(num_tokens, shaped)) / sum(len(b.items) for b in shaped))
            progress(f"repeat {repeat + 1}: {name}: {runs[name][-1]:.0f} real tokens/s")
    torch.set_num_threads(threads)
    print("| configuration of ModelRunner.run | real tokens/s (median) | runs |\n|---|---|---|")
    for name, values in runs.items():
        print(f"| {name} | {median(values):.0f} | {', '.join(f'{v:.0f}' for v in values)} |")
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
