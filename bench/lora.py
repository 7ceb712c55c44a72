"""LoRA traffic in the runner, in process (no HTTP, no scheduler): items/s of one scheduled batch of
requests all on the base model, all through one adapter, spread over --adapters adapters in the same
forwards (what the server does: server/lora_rows.py), and the same mixed traffic batched by adapter
(one run per adapter: the alternative the server did not take), interleaved round by round, medians;
with the largest score difference between the mixed and the by-adapter runs (the same rows, so ~0).

Adapters are built here with peft over the loaded model (rank --rank on every projection of every
layer, lora_B drawn at random) and loaded as `--lora-paths` loads them.

    python -m bench.lora [--model-path default] [--adapters 4] [--requests 8] [--items 8] \\
        [--query-tokens 120] [--item-tokens 40] [--rank 16] [--rounds 5] [--dtype float32] [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from bench.lora_models import save_adapter
from server.lora import load_adapters
from server.model_loader import load_model
from server.model_runner import ModelRunner
from server.sequence import Request, ScoringOptions

SCENARIOS = ("base", "single", "mixed", "by_adapter")


def batch_of(args, adapters: list[str | None], generator: torch.Generator, vocab_size: int) -> list[Request]:
    """--requests requests of fresh random ids (no query repeats: the cache saves nothing), the
    i-th through adapters[i % len(adapters)]."""
    options = ScoringOptions((5, 17), False)

    def ids(n: int) -> tuple[int, ...]:
        return tuple(torch.randint(3, vocab_size, (n,), generator=generator).tolist())
    return [Request.create(ids(args.query_tokens), [ids(args.item_tokens) for _ in range(args.items)], options,
                           adapters[i % len(adapters)]) for i in range(args.requests)]


def timed(runner: ModelRunner, groups: list[list[Request]]) -> tuple[float, float, list[list[float]]]:
    """Wall seconds and this process's CPU seconds to run each group as one batch, and the scores
    in request order. NOTE: on a shared machine the CPU seconds are the steadier cost: another
    process's load stretches the wall time, much less the work this one does."""
    started, cpu_started = time.perf_counter(), time.process_time()
    scores = {}
    for group in groups:
        sequences = [seq for request in group for seq in request.sequences]
        for seq, row in zip(sequences, runner.run(sequences).scores):
            scores[id(seq)] = row
        runner.keep_only(())
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    ordered = sorted((request.rid, request) for group in groups for request in group)
    return seconds, cpu_seconds, [scores[id(seq)] for _, request in ordered for seq in request.sequences]


def one_round(args, runner: ModelRunner, names: list[str], generator: torch.Generator,
              start: int = 0) -> dict[str, float]:
    """Items/s of each scenario on fresh requests, and the mixed/by-adapter score difference."""
    vocab = runner.vocab_size
    base = batch_of(args, [None], generator, vocab)
    single = batch_of(args, names[:1], generator, vocab)
    mixed = batch_of(args, names, generator, vocab)
    twin = [Request.create(r.prefix_ids, [s.own_ids for s in r.sequences], r.options, r.adapter) for r in mixed]
    by_adapter = [[r for r in twin if r.adapter == name] for name in names]
    num_items = args.requests * args.items
    groups = {"base": [base], "single": [single], "mixed": [mixed], "by_adapter": by_adapter}
    seconds, cpu_seconds, scores = {}, {}, {}
    # each round starts at the next scenario: a drift in the machine's load falls on all of them
    for name in SCENARIOS[start:] + SCENARIOS[:start]:
        seconds[name], cpu_seconds[name], scores[name] = timed(runner, groups[name])
    rates = {name: num_items / seconds[name] for name in SCENARIOS}
    rates.update({f"{name}_cpu_ms_per_item": 1000 * cpu_seconds[name] / num_items for name in SCENARIOS})
    rates["max_diff"] = max(abs(a - b) for x, y in zip(scores["mixed"], scores["by_adapter"]) for a, b in zip(x, y))
    return rates


def measure(args) -> dict[str, float]:
    torch.set_num_threads(args.threads or torch.get_num_threads())
    model, tokenizer = load_model(args.model_path, torch.device("cpu"), getattr(torch, args.dtype))
    names = [f"adapter{i}" for i in range(args.adapters)]
    with tempfile.TemporaryDirectory() as folder:
        paths = {name: str(save_adapter(model, Path(folder) / name, seed=i, rank=args.rank, alpha=2 * args.rank))
                 for i, name in enumerate(names)}
        runner = ModelRunner(model, tokenizer, adapters=load_adapters(paths, model))
    generator = torch.Generator().manual_seed(0)
    one_round(args, runner, names, generator)  # warm-up
    rounds = [one_round(args, runner, names, generator, k % len(SCENARIOS)) for k in range(args.rounds)]
    if args.verbose:
        for k, rates in enumerate(rounds):
            print(f"round {k} items/s: " + ", ".join(f"{name} {rates[name]:.1f}" for name in SCENARIOS))
    result = {name: statistics.median(r[name] for r in rounds) for name in rounds[0] if name != "max_diff"}
    result["max_diff"] = max(r["max_diff"] for r in rounds)
    cpu = {name: result[f"{name}_cpu_ms_per_item"] for name in SCENARIOS}
    # ratios of throughput: > 1 means the first is faster (by wall time; by CPU time: costs less)
    result.update(mixed_vs_single=result["mixed"] / result["single"], single_vs_base=result["single"] / result["base"],
                  mixed_vs_by_adapter=result["mixed"] / result["by_adapter"],
                  cpu_mixed_vs_single=cpu["single"] / cpu["mixed"], cpu_single_vs_base=cpu["base"] / cpu["single"],
                  cpu_mixed_vs_by_adapter=cpu["by_adapter"] / cpu["mixed"])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lora", description=__doc__.split("\n")[0])
    parser.add_argument("--model-path", default="default")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    for flag, default in [("adapters", 4), ("requests", 8), ("items", 8), ("query-tokens", 120),
                          ("item-tokens", 40), ("rank", 16), ("rounds", 5), ("threads", 0)]:
        parser.add_argument(f"--{flag}", type=int, default=default)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="each round's items/s too")
    args = parser.parse_args(argv)
    result = measure(args)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"median of {args.rounds} rounds ({args.requests} requests x {args.items} items, Q={args.query_tokens} "
          f"I={args.item_tokens}, rank {args.rank}, {args.dtype}, {torch.get_num_threads()} threads):")
    for name in SCENARIOS:
        print(f"  {name:<11} {result[name]:8.1f} items/s  {result[f'{name}_cpu_ms_per_item']:8.1f} CPU ms/item")
    for basis, prefix in (("wall time", ""), ("CPU time", "cpu_")):
        print(f"by {basis}: mixed {args.adapters} adapters / single adapter: "
              f"{result[prefix + 'mixed_vs_single']:.2f}x; single adapter / base: "
              f"{result[prefix + 'single_vs_base']:.2f}x; mixed in one batch / batched by "
              f"adapter: {result[prefix + 'mixed_vs_by_adapter']:.2f}x")
    print(f"largest score difference mixed vs by adapter: {result['max_diff']:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
