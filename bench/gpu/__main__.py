"""`python -m bench.gpu [--dry-run]`: SGLang's scoring table on our server, one command.

1. the environment (Python, torch with CUDA, the server's packages), stop with what is missing;
2. CUDA correctness on a tiny Qwen3 (bench/gpu/checks.py), stop if it fails;
3. a random-init Qwen3-0.6B-shaped model (bench/gpu/qwen3-0.6b.json) saved to a temp folder;
4. `python -m server` on it in bfloat16 on CUDA, then bench.score_load's open-loop Poisson run
   (160 requests/s, 60 s, query 120 + 10 items x 180 token ids) with GPU memory sampled;
5. SGLang's summary fields, peak running / waiting, peak GPU memory, beside SGLang's H100 figures;
6. the ratios `make bench` reports: server / the plain batched forward of the same workload, and the
   fraction of the bf16 matmul ceiling, both measured in-process after the load (bench/gpu/ratios.py).
--dry-run: a tiny model on the CPU and a 1 s load: the whole path in seconds.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from bench.gpu.env import check_environment, describe

# SGLang's table for the fix this project comes from (H100, Qwen3-0.6B, same workload).
SGLANG = "SGLang (H100, Qwen3-0.6B): 1,197.76 items/s, P50 119 ms, P99 255 ms, 25% failed"
FULL = {"rate": 160.0, "duration": 60.0, "num_items": 10, "query_tokens": 120,
        "item_tokens": 180, "label_ids": "9230,2838"}
DRY = {"rate": 10.0, "duration": 1.0, "num_items": 4, "query_tokens": 12, "item_tokens": 18,
       "label_ids": "5,17"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--dry-run", action="store_true", help="tiny model on the CPU, 1 s of load")
    for name, value in FULL.items():
        add(f"--{name.replace('_', '-')}", default=None,
            help=f"default {value} ({DRY[name]} with --dry-run)")
    add("--seed", type=int, default=0)
    add("--timeout", type=float, default=60.0, help="seconds per request (the server's default)")
    add("--server-arg", action="append", default=[],
        help="extra flag for python -m server, e.g. --server-arg=--max-prefill-tokens=32768")
    return parser


def load_args(args: argparse.Namespace, url: str) -> list[str]:
    defaults = DRY if args.dry_run else FULL
    values = {name: getattr(args, name) or defaults[name] for name in FULL}
    return ["--url", url, "--seed", str(args.seed), "--timeout", str(args.timeout),
            *(item for name, value in values.items()
              for item in (f"--{name.replace('_', '-')}", str(value)))]


def run_load(folder: Path, device: str, args: argparse.Namespace) -> tuple[str, float]:
    """Serve `folder` in bfloat16 on `device`, run the open-loop load; the report text and the
    server's items/s."""
    from bench import score_load
    from bench.gpu.memory import GpuMemorySampler
    from bench.server_process import RssSampler, start_server
    from bench.summary import format_summary

    server_args = ["--model-path", str(folder), "--device", device, "--dtype", "bfloat16",
                   *args.server_arg]
    with start_server("server", server_args) as server:
        server.wait_ready(600)
        load = score_load.build_parser().parse_args(load_args(args, server.url))
        with GpuMemorySampler(server.pid) as gpu, RssSampler(server.pid) as rss:
            summary = asyncio.run(score_load.run(load))
    gpu_text = f"{gpu.peak_mib:.0f} MiB" if gpu.peak_mib is not None else "n/a (no nvidia-smi)"
    return (f"{format_summary(summary)}\npeak GPU memory (server process): {gpu_text}\n"
            f"peak RSS (server process): {rss.peak_mib:.0f} MiB\nfor comparison: {SGLANG}",
            summary.items_per_s)


def workload_of(args: argparse.Namespace):
    from bench.workload import Workload

    defaults = DRY if args.dry_run else FULL
    sizes = [int(getattr(args, name) or defaults[name])
             for name in ("num_items", "query_tokens", "item_tokens")]
    return Workload(*sizes)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problems = check_environment(need_cuda=not args.dry_run)
    if problems:
        print("not ready to run:\n" + "\n".join(f"- {problem}" for problem in problems))
        return 2
    import torch

    from bench.gpu.checks import check_correctness
    from bench.gpu.model import build_model_folder

    print(describe(), flush=True)
    device = "cpu" if args.dry_run else "cuda"
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as work:
        tiny = build_model_folder(Path(work) / "tiny", tiny=True, dtype=torch.float32)
        checks = check_correctness(tiny, torch.device(device))
        print("\n".join(map(str, checks)), flush=True)
        if not all(check.ok for check in checks):
            print("correctness checks failed: not running the load")
            return 3
        folder = tiny if args.dry_run else build_model_folder(Path(work) / "qwen3-0.6b", False)
        print(f"serving {folder.name} in bfloat16 on {device}", flush=True)
        text, items_per_s = run_load(folder, device, args)
        print(text, flush=True)
        from bench.gpu.ratios import measure_ratios

        print(measure_ratios(folder, device, workload_of(args), items_per_s, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
