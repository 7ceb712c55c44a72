"""`python -m bench.compare`: in ONE run, items/s of (1) the naive one-forward-per-item loop, (2) the
offline batched path (ModelRunner.run, no HTTP, no scheduler), (3) the server over HTTP at
saturation (closed loop), interleaved per repeat on the same requests, medians of the repeats; the
same (2)/(3) in the other dtype and the label-probability difference between dtypes; per dtype, the
plain batched transformers forward (P: query+item for every item, one forward per request) on the
same requests, eager and compiled (Pc: torch.compile, with inductor freezing by default), the tokens
each path computes per item, and every path's fraction of the machine's matmul ceiling in that
dtype, timed in the same repeat (bench/ceiling.py); (4) requests/s of the scheduler + HTTP with a
model that costs nothing; (5) the server's peak RSS under load; (6) on the first server, the uniform
and the mixed-length workload's real tokens/s and the share of computed tokens that were padding,
from the server's own counters.

Only ratios measured side by side mean anything on a shared machine; absolute numbers move.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
import urllib.request
from dataclasses import dataclass, field

import torch

from bench import offline
from bench.ceiling import Ceiling, measure_ceiling, processor
from bench.client import run_closed_loop
from bench.server_process import RssSampler, ServerProcess, start_server
from bench.summary import LoadPeaks, summarize
from bench.tokens import read_token_counts
from bench.workload import MIXED, ScoreBody, Workload, make_bodies, median
from server.model_loader import cpu_has_native_bf16

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
FREE_BODY = ScoreBody((101,), ((102,),), (9230, 2838))  # the smallest valid request: 1 item


@dataclass
class Row:
    """Items/s of one way of computing the scores, one value per repeat."""

    name: str
    dtype: str
    runs: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return median(self.runs)


@dataclass
class TokenRow:
    """One workload on the server: real (non-padding) tokens/s, padding share, items/s per repeat."""

    tokens_per_s: list[float] = field(default_factory=list)
    padding_fractions: list[float] = field(default_factory=list)
    items_per_s: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class ServerRun:
    items_per_s: float
    tokens_per_s: float     # real tokens computed (queries once, items) / time to complete all
    padding_fraction: float  # of the token positions the forwards computed
    peaks: LoadPeaks
    computed_per_item: float = 0.0  # token positions the forwards computed per item (padding in)


@dataclass
class Report:
    paths: dict[str, Row] = field(default_factory=dict)
    ceilings: dict[str, list[Ceiling]] = field(default_factory=dict)  # row suffix -> per repeat
    tokens_per_item: dict[str, float] = field(default_factory=dict)   # path key -> computed
    tokens: dict[str, TokenRow] = field(default_factory=dict)  # workload name -> its server runs
    notes: list[str] = field(default_factory=list)

    def path(self, key: str, name: str, dtype: str) -> Row:
        return self.paths.setdefault(key, Row(name, dtype))

    def add_tokens(self, workload: str, run: ServerRun) -> None:
        row = self.tokens.setdefault(workload, TokenRow())
        row.tokens_per_s.append(run.tokens_per_s)
        row.padding_fractions.append(run.padding_fraction)
        row.items_per_s.append(run.items_per_s)

    def ratio(self, numerator: str, denominator: str) -> float:
        return self.paths[numerator].median / self.paths[denominator].median


def format_report(report: Report) -> str:
    lines = ["| # | way of computing the scores | dtype | items/s (median) | runs |",
             "|---|---|---|---|---|"]
    for key, path in report.paths.items():
        runs = ", ".join(f"{run:.2f}" for run in path.runs)
        lines.append(f"| {key} | {path.name} | {path.dtype} | {path.median:.2f} | {runs} |")
    ratios = [("server / naive", "3", "1"), ("server / offline", "3", "2"),
              ("offline / naive", "2", "1"), ("server / plain batched", "3", "P"),
              ("server / naive", "3b", "1"), ("server / offline", "3b", "2b"),
              ("server / plain batched", "3b", "Pb"), ("server / plain compiled", "3", "Pc"),
              ("server / plain compiled", "3b", "Pcb"), ("plain compiled / plain batched", "Pc", "P"),
              ("plain compiled / plain batched", "Pcb", "Pb")]
    lines.append("")
    for label, num, den in ratios:
        if num in report.paths and den in report.paths:
            dtypes = f"{report.paths[num].dtype} vs {report.paths[den].dtype}"
            lines.append(f"- {label} ({dtypes}): {report.ratio(num, den):.2f}x")
    lines += [f"- {note}" for note in report.notes]
    return "\n".join(lines + format_ceilings(report) + format_tokens(report.tokens))


def format_ceilings(report: Report) -> list[str]:
    """Per dtype: the matmul ceiling (best of the repeats), each path's fraction of it (medians),
    and the tokens per item each path computed."""
    if not report.ceilings:
        return []
    lines = ["", "| dtype | matmul GFLOP/s (best) | ceiling items/s | plain batched | plain compiled | "
             "offline | server | server / plain batched | tokens per item: plain / server |",
             "|---|---|---|---|---|---|---|---|---|"]
    for suffix, ceilings in report.ceilings.items():
        ceiling = max(ceilings, key=lambda c: c.matmul_gflops)
        cells = [f"{ceiling.fraction(report.paths[k + suffix].median):.2f}"
                 if k + suffix in report.paths else "-" for k in ("P", "Pc", "2", "3")]
        has_both = {"3" + suffix, "P" + suffix} <= report.paths.keys()
        ratio = f"{report.ratio('3' + suffix, 'P' + suffix):.2f}x" if has_both else "-"
        tokens = " / ".join(f"{report.tokens_per_item.get(k + suffix, 0):.0f}" for k in "P3")
        lines.append(f"| {ceiling.dtype} | {ceiling.matmul_gflops:.0f} | {ceiling.items_per_s:.1f} | "
                     + " | ".join(cells) + f" | {ratio} | {tokens} |")
    lines += ["", "- fractions: items/s (median) / ceiling items/s; the ceiling: every linear-layer "
              "FLOP of the tokens the server computes per item at the model-shaped matmul's "
              "speed (bench/ceiling.py)"]
    return lines


def format_tokens(tokens: dict[str, TokenRow]) -> list[str]:
    if not tokens:
        return []
    header = ("| workload (first server) | real tokens/s (median) | runs | padding share of "
              "computed tokens | items/s (median) |")
    lines = ["", header, "|---|---|---|---|---|"]
    for name, row in tokens.items():
        runs = ", ".join(f"{run:.0f}" for run in row.tokens_per_s)
        lines.append(f"| {name} | {median(row.tokens_per_s):.0f} | {runs} | "
                     f"{median(row.padding_fractions):.1%} | {median(row.items_per_s):.2f} |")
    if len(tokens) == 2:
        uniform, mixed = (median(row.tokens_per_s) for row in tokens.values())
        lines += ["", f"- mixed / uniform real tokens/s: {mixed / uniform:.2f}"]
    return lines


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def server_run(server: ServerProcess, bodies: list[ScoreBody], concurrency: int,
               rss: list[float]) -> ServerRun:
    before = read_token_counts(server.url)
    with RssSampler(server.pid) as sampler:
        result = asyncio.run(run_closed_loop(server.url, bodies, concurrency, timeout_s=600))
    counts = read_token_counts(server.url) - before
    rss.append(sampler.peak_mib)
    summary = summarize(result.outcomes, result.peaks, duration_s=0, target_rate_per_s=0,
                        item_count=len(bodies[0].items), distribution="CLOSED")
    if summary.num_failed:
        raise RuntimeError(f"{summary.num_failed} requests failed: {summary.failed_by_status}")
    num_items = sum(len(body.items) for body in bodies)
    return ServerRun(summary.items_per_s, counts.num_real / summary.time_to_complete_all_s,
                     counts.padding_fraction, result.peaks, counts.num_computed / num_items)


def measure_dtype(report: Report, suffix: str, dtype: str, runner, server: ServerProcess,
                  batches: list[list[ScoreBody]], args, naive_model=None,
                  mixed_batches: list[list[ScoreBody]] | None = None, plain_compiled=None) -> list:
    """Interleaved repeats of (naive), plain batched (eager, and compiled when given), offline,
    server (and the server on mixed lengths) on the same bodies, then the matmul ceiling; returns
    the offline scores of every repeat, for the dtype comparison."""
    rss: list[float] = []
    scores = []
    for repeat, bodies in enumerate(batches, 1):
        if naive_model is not None:
            naive = offline.measure_naive(naive_model, bodies[:args.naive_requests])
            report.path("1", "naive loop: one transformers forward per item", "float32"
                        ).runs.append(naive.items_per_s)
        plain = offline.measure_plain_batched(runner.model, bodies)
        report.path("P" + suffix, "plain batched forward: query+item per item, one forward a "
                    "request", dtype).runs.append(plain.items_per_s)
        if plain_compiled is not None:
            frozen = " with inductor freezing" if args.plain_compile == "freeze" else ""
            report.path("Pc" + suffix, f"the same, torch.compile{frozen}", dtype).runs.append(
                offline.measure_plain_batched(plain_compiled, bodies).items_per_s)
        measured = offline.measure_runner(runner, bodies)
        report.path("2" + suffix, "offline: ModelRunner.run per request, no HTTP",
                    dtype).runs.append(measured.items_per_s)
        scores.append(measured.scores)
        run = server_run(server, bodies, args.concurrency, rss)
        compiled = " (compiled)" if compile_of(server).startswith("on") else " (eager)"
        report.path("3" + suffix, f"server{compiled} over HTTP, closed loop, {args.concurrency} "
                    "in flight", dtype).runs.append(run.items_per_s)
        record_ceiling(report, suffix, dtype, runner.model, bodies[0], run)
        keys = (["1"] if naive_model is not None else []) + [
            k + suffix for k in ("P", "Pc", "2", "3") if k + suffix in report.paths]
        progress(f"{dtype} repeat {repeat}/{len(batches)}: " + ", ".join(
            f"{key} {report.paths[key].runs[-1]:.2f}" for key in keys) + " items/s; ceiling "
            f"{report.ceilings[suffix][-1].items_per_s:.1f}; peak running "
            f"{run.peaks.peak_running}, waiting {run.peaks.peak_waiting}")
        if mixed_batches:
            measure_mixed(report, dtype, server, run, mixed_batches[repeat - 1], args, rss)
        if naive_model is not None and repeat == 1:
            num = len(bodies[:args.naive_requests]) * len(bodies[0].items)
            diff = offline.max_abs_diff(naive.scores, measured.scores[:num])
            report.notes.append(f"max |offline - naive| label probability ({dtype}): {diff:.2e}")
            diff = offline.max_abs_diff(plain.scores, measured.scores)
            report.notes.append(f"max |offline - plain batched| label probability ({dtype}): "
                                f"{diff:.2e}")
    report.notes.append(f"server ({dtype}) peak RSS: {max(rss):.0f} MiB sampled under load, "
                        f"{server.peak_rss_mib():.0f} MiB VmHWM since start (includes loading)")
    return scores


def record_ceiling(report: Report, suffix: str, dtype: str, model, body: ScoreBody,
                   run: ServerRun) -> None:
    """The matmul ceiling timed right after this repeat's paths, and the tokens per item each
    path computed (the server's from its counters)."""
    query, items = len(body.query), len(body.items)
    report.ceilings.setdefault(suffix, []).append(
        measure_ceiling(model, DTYPES[dtype], query, len(body.items[0]), items))
    report.tokens_per_item["P" + suffix] = query + len(body.items[0])
    report.tokens_per_item["3" + suffix] = run.computed_per_item


def measure_mixed(report: Report, dtype: str, server: ServerProcess, uniform: ServerRun,
                  bodies: list[ScoreBody], args, rss: list[float]) -> None:
    """The mixed-length workload on the same server, right after the uniform one."""
    mixed = server_run(server, bodies, args.concurrency, rss)
    report.add_tokens(f"uniform Q=120, I=180 ({dtype})", uniform)
    report.add_tokens(f"mixed Q~U[40,200], I~U[20,340] ({dtype})", mixed)
    progress(f"{dtype} real tokens/s: uniform {uniform.tokens_per_s:.0f} (padding "
             f"{uniform.padding_fraction:.1%}), mixed {mixed.tokens_per_s:.0f} (padding "
             f"{mixed.padding_fraction:.1%})")


def warm_up(runner, server: ServerProcess, body: ScoreBody, args, naive_model=None) -> None:
    if naive_model is not None:
        offline.naive_scores(naive_model, ScoreBody(body.query, body.items[:2],
                                                    body.label_token_ids))
    offline.plain_batched_scores(runner.model, body)
    offline.runner_scores(runner, body)
    asyncio.run(run_closed_loop(server.url, [body] * args.concurrency, args.concurrency, 600))


def measure_free_server(report: Report, bodies: list[ScoreBody], args) -> None:
    with start_server("bench.free_server", []) as server:
        server.wait_ready(60)
        for label, shape in ((f"{len(bodies[0].items)}-item requests as above", bodies),
                             ("1-item, 1+1-token requests", [FREE_BODY])):
            work = (shape * (args.free_requests // len(shape) + 1))[:args.free_requests]
            asyncio.run(run_closed_loop(server.url, work[:50], 32, 60))  # warm up
            result = asyncio.run(run_closed_loop(server.url, work, 32, 60))
            elapsed = max(o.done_s for o in result.outcomes)
            ok = sum(o.status == 200 for o in result.outcomes)
            report.notes.append(f"scheduler only (FreeRunner, HTTP, 32 in flight), {label}: "
                                f"{ok / elapsed:.0f} requests/s ({ok} of {len(work)} ok)")
            progress(report.notes[-1])


def compile_of(server: ServerProcess) -> str:
    """What the server did with --compile, and why (its /get_server_info)."""
    with urllib.request.urlopen(server.url + "/get_server_info", timeout=10) as response:
        info = json.load(response)
    return f"{info['compile']} ({info['compile_reason']})"


def other_dtype(choice: str) -> str:
    """The second dtype to measure: `choice`, with auto resolved as the server's --dtype auto is."""
    if choice != "auto":
        return choice
    return "bfloat16" if cpu_has_native_bf16() else "none"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--dtype", choices=list(DTYPES), default="float32", help="dtype of rows 2 and 3")
    add("--other-dtype", choices=[*DTYPES, "none", "auto"], default="auto",
        help="dtype of rows 2b and 3b (none: skip; auto: bfloat16 where the CPU has native bf16, "
             "else none: emulated bf16 takes many minutes and says nothing about a deployment)")
    add("--repeats", type=int, default=3)
    add("--requests", type=int, default=4, help="requests per measurement of rows 2 and 3")
    add("--naive-requests", type=int, default=1, help="requests per measurement of row 1")
    add("--concurrency", type=int, default=2, help="requests in flight against the server")
    add("--free-requests", type=int, default=2000, help="requests against the free server")
    add("--seed", type=int, default=0)
    add("--mixed", action=argparse.BooleanOptionalAction, default=True,
        help="also run the mixed-length workload on the first server (row 6)")
    add("--model-path", default="default")
    add("--compile", choices=["auto", "on", "off"], default="auto",
        help="the servers' --compile (rows 3 and 3b; auto, the server's default, compiles bf16 on "
             "CPUs with AMX or AVX-512 bf16: minutes before ready on a cold compile cache); the "
             "in-process rows stay eager")
    add("--plain-compile", choices=["none", "compile", "freeze"], default="freeze",
        help="row Pc: the plain batched forward under torch.compile (freeze: with inductor's "
             "freezing, the fastest torch reaches on it; compiling takes minutes); none: skip")
    add("--threads", type=int, default=None,
        help="torch threads in-process and in the servers (--num-threads; default: torch's)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    workload = Workload()  # Q=120, I=180, N=10, labels 9230,2838: the figure
    bodies = make_bodies(workload, 1 + args.repeats * args.requests, args.seed)
    warm, rest = bodies[0], bodies[1:]
    batches = [rest[i * args.requests:(i + 1) * args.requests] for i in range(args.repeats)]
    mixed = make_bodies(MIXED, args.repeats * args.requests, args.seed + 1) if args.mixed else []
    mixed_batches = [mixed[i * args.requests:(i + 1) * args.requests]
                     for i in range(args.repeats)] if args.mixed else None
    report = Report()
    other = other_dtype(args.other_dtype)
    dtypes = [args.dtype] + ([other] if other not in ("none", args.dtype) else [])
    threads = ["--num-threads", str(args.threads)] if args.threads else []
    if args.threads:
        torch.set_num_threads(args.threads)
    with contextlib.ExitStack() as stack:
        # Throughput at saturation, not timeouts: on a busy 2-core machine a queued request can
        # wait past the server's default 60 s and fail the run (seen, both layouts).
        servers = [stack.enter_context(start_server(
            "server", ["--model-path", args.model_path, "--dtype", dtype,
                       "--request-timeout", "600", *threads,
                       "--compile", args.compile]))
            for dtype in dtypes]
        progress(f"servers starting ({', '.join(dtypes)}); loading the model in-process")
        naive_model_runner = offline.load_runner(torch.float32, args.model_path)
        scores = {}
        for index, (dtype, server) in enumerate(zip(dtypes, servers)):
            runner = (naive_model_runner if DTYPES[dtype] == torch.float32
                      else offline.with_dtype(naive_model_runner, DTYPES[dtype]))
            naive_model = naive_model_runner.model if index == 0 else None
            server.wait_ready(1800)  # a cold compile takes minutes (--compile auto on AMX: bf16)
            report.notes.append(f"server ({dtype}) --compile {args.compile}: {compile_of(server)}")
            progress(report.notes[-1])
            progress(f"{dtype}: warming up")
            warm_up(runner, server, warm, args, naive_model)
            plain_compiled = (None if args.plain_compile == "none" else
                              offline.compiled_plain(runner.model, warm, args.plain_compile == "freeze"))
            scores[dtype] = measure_dtype(report, "" if index == 0 else "b", dtype, runner,
                                          server, batches, args, naive_model,
                                          mixed_batches if index == 0 else None, plain_compiled)
        if len(scores) == 2:
            flat = [[row for rep in scores[d] for row in rep] for d in dtypes]
            report.notes.append(
                f"max |{dtypes[1]} - {dtypes[0]}| label probability on the same {len(flat[0])} "
                f"items: {offline.max_abs_diff(*flat):.2e} (full vocabulary, apply_softmax=false; "
                f"largest {dtypes[0]} value {max(max(row) for row in flat[0]):.2e}), "
                f"{offline.max_abs_diff(*map(offline.label_softmax, flat)):.4f} "
                f"(softmax over the labels, apply_softmax=true)")
    measure_free_server(report, rest, args)
    print(f"\n{processor()}\nQ={workload.query_tokens}, I={workload.item_tokens}, N={workload.num_items}, "
          f"{args.repeats} repeats x {args.requests} requests ({args.naive_requests} for the "
          f"naive loop), torch threads {torch.get_num_threads()}\n")
    print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
