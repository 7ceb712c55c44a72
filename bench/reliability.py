"""`python -m bench.reliability`: overload a real `python -m server` and check that nothing is lost.

One run = measure capacity (closed loop, `--capacity-s` seconds), then open-loop Poisson load at
`--overload` times that rate for `--duration` seconds while /get_load and /metrics are sampled, then
wait for the gauges to read 0. Repeated `--runs` times on the same server process, with its RSS
(VmRSS) read after each run. Prints the figures of each run: answers by status, 503s without a
Retry-After, peak running and waiting, seconds until the gauges read 0, RSS.

  python -m bench.reliability --duration 120 --runs 3                  # the embedded SmolLM2
  python -m bench.reliability --model-path /path/to/folder --duration 60 [--json]

A program that prints figures: the verdict (which figures break the contract: every request gets
exactly one answer, 200, 503 with Retry-After or 504; waiting never above the cap) lives with the
tests that use it, tests/reliability/checks.py; tests/reliability drives this with a tiny model.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bench.client import check_loopback, fetch_vocab_size
from bench.server_process import start_server
from bench.workload import Workload, make_bodies, poisson_send_times

NO_ANSWER = 0        # status of a request that got no HTTP answer (refused, reset, client timeout)
SAMPLE_INTERVAL_S = 0.05
GAUGES = ("num_running_reqs", "num_queue_reqs", "num_used_tokens")


# ---- what a run saw (pure) ---------------------------------------------------------------------

@dataclass(frozen=True)
class Answer:
    """One request's answer: HTTP status (NO_ANSWER if none), its Retry-After header, or the
    client-side error's type when no answer came."""

    status: int
    retry_after: str | None = None
    error: str | None = None
    detail: str = ""  # the client-side error's message


@dataclass(frozen=True)
class LoadSample:
    running: int   # /get_load: num_reqs - num_waiting_reqs
    waiting: int   # /get_load: num_waiting_reqs


@dataclass(frozen=True)
class RunReport:
    """One overload run, as printed and as checked."""

    capacity_per_s: float
    target_rate_per_s: float
    num_sent: int
    by_status: dict[str, int]
    peak_running: int
    peak_waiting: int
    num_samples: int
    settled_s: float | None          # seconds until /get_load and /metrics read 0 (None: never)
    rss_mib: float                   # VmRSS after the run settled
    num_503_without_retry_after: int
    # What the figures came from, for checks (tests/reliability/checks.py); not printed.
    answers: list[Answer] = field(default_factory=list, repr=False)
    samples: list[LoadSample] = field(default_factory=list, repr=False)


def build_report(capacity_per_s: float, rate_per_s: float, answers: list[Answer],
                 samples: list[LoadSample], settled_s: float | None, rss_mib: float) -> RunReport:
    by_status = Counter(str(a.status) for a in answers)
    no_retry = sum(1 for a in answers if a.status == 503 and not (a.retry_after or "").isdigit())
    return RunReport(capacity_per_s, rate_per_s, len(answers), dict(sorted(by_status.items())),
                     max((s.running for s in samples), default=0),
                     max((s.waiting for s in samples), default=0), len(samples), settled_s,
                     rss_mib, no_retry, list(answers), list(samples))


def format_reports(reports: list[RunReport]) -> str:
    """A markdown table, one row per run (status 0: no HTTP answer)."""
    lines = ["| run | capacity req/s | rate req/s | sent | answers by status | 503 w/o Retry-After | "
             "peak running | peak waiting | gauges at 0 after | RSS MiB |", "|" + "---|" * 10]
    for i, r in enumerate(reports, 1):
        settled = f"{r.settled_s:.2f} s" if r.settled_s is not None else "never"
        statuses = ", ".join(f"{k}: {v}" for k, v in r.by_status.items())
        lines.append(f"| {i} | {r.capacity_per_s:.1f} | {r.target_rate_per_s:.1f} | {r.num_sent} | "
                     f"{statuses} | {r.num_503_without_retry_after} | {r.peak_running} | "
                     f"{r.peak_waiting} | {settled} | {r.rss_mib:.0f} |")
    return "\n".join(lines)


# ---- HTTP (thin) --------------------------------------------------------------------------------

def _session(timeout_s: float, fresh_connections: bool = False) -> aiohttp.ClientSession:
    # limit=0: no client-side connection cap, or the open loop would quietly become a closed one.
    # fresh_connections: one TCP connection per request, so that a server closing its idle
    # keep-alive connections (as it does on SIGTERM) cannot be mistaken for a lost request.
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, force_close=fresh_connections),
        timeout=aiohttp.ClientTimeout(total=timeout_s))


async def post(session: aiohttp.ClientSession, url: str, data: bytes) -> Answer:
    try:
        async with session.post(f"{url}/v1/score", data=data,
                                headers={"Content-Type": "application/json"}) as response:
            await response.read()
            return Answer(response.status, response.headers.get("Retry-After"))
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as error:
        return Answer(NO_ANSWER, error=type(error).__name__, detail=str(error)[:200])


async def measure_capacity(url: str, payloads: list[bytes], seconds: float, concurrency: int,
                           timeout_s: float) -> float:
    """Requests/s answered 200 with `concurrency` in flight for about `seconds` (a closed loop)."""
    done = 0
    async with _session(timeout_s) as session:
        start = time.perf_counter()

        async def worker(offset: int) -> None:
            nonlocal done
            i = offset
            while time.perf_counter() - start < seconds:
                answer = await post(session, url, payloads[i % len(payloads)])
                done += answer.status == 200
                i += concurrency
        await asyncio.gather(*(worker(k) for k in range(concurrency)))
        return done / (time.perf_counter() - start)


async def read_load(session: aiohttp.ClientSession, url: str) -> LoadSample:
    async with session.get(f"{url}/get_load") as response:
        [rank] = await response.json()
    return LoadSample(rank["num_reqs"] - rank["num_waiting_reqs"], rank["num_waiting_reqs"])


async def read_gauges(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(f"{url}/metrics") as response:
        text = await response.text()
    return {s.name.removeprefix("sglang:"): s.value for family in text_string_to_metric_families(text)
            if family.type == "gauge" for s in family.samples}


async def open_loop(url: str, payloads: list[bytes], send_times_s: list[float], timeout_s: float,
                    fresh_connections: bool = False) -> tuple[list[Answer], list[LoadSample]]:
    """Send payloads[i] at send_times_s[i] (each its own task) while sampling /get_load."""
    samples: list[LoadSample] = []
    stop = asyncio.Event()

    async def sample(session: aiohttp.ClientSession) -> None:
        while not stop.is_set():  # bounded: stop is set once every request has its answer
            try:
                samples.append(await read_load(session, url))
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
                pass  # a missed sample is not a zero
            await asyncio.sleep(SAMPLE_INTERVAL_S)

    async with _session(timeout_s, fresh_connections) as session:
        sampler = asyncio.create_task(sample(session))
        start, tasks = time.perf_counter(), []
        for data, send_s in zip(payloads, send_times_s):
            await asyncio.sleep(max(0.0, start + send_s - time.perf_counter()))
            tasks.append(asyncio.create_task(post(session, url, data)))
        answers = await asyncio.gather(*tasks)
        stop.set()
        await sampler
    return list(answers), samples


async def wait_settled(url: str, timeout_s: float) -> float | None:
    """Seconds until /get_load and every /metrics gauge in GAUGES read 0; None if not within
    timeout_s."""
    start = time.perf_counter()
    async with _session(5) as session:
        while time.perf_counter() - start < timeout_s:
            load, gauges = await read_load(session, url), await read_gauges(session, url)
            if (load.running, load.waiting) == (0, 0) and all(gauges[g] == 0 for g in GAUGES):
                return time.perf_counter() - start
            await asyncio.sleep(0.05)
    return None


def make_payloads(workload: Workload, num_requests: int, seed: int) -> list[bytes]:
    """JSON bodies, encoded before the clock starts (the client shares the CPU with the server)."""
    return [json.dumps(b.to_json()).encode() for b in make_bodies(workload, num_requests, seed)]


async def served_workload(url: str, workload: Workload) -> Workload:
    """`workload` with the served model's vocabulary size (token ids are drawn below it)."""
    return Workload(**{**asdict(workload), "vocab_size": await fetch_vocab_size(url)})


# ---- one run, many runs -------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    duration_s: float = 5.0
    overload: float = 2.0          # open-loop rate = overload * measured capacity
    capacity_s: float = 2.0
    concurrency: int = 8           # closed loop for the capacity measurement
    workload: Workload = Workload(num_items=4, query_tokens=48, item_tokens=48, label_ids=(5, 17))
    timeout_s: float = 30.0        # client side; far above the server's --request-timeout
    settle_s: float = 10.0
    seed: int = 0


async def overload_run(url: str, plan: Plan, rss_mib, run_index: int = 0) -> RunReport:
    """Capacity, then plan.overload x capacity open-loop, then settle; `rss_mib()` after it."""
    url = check_loopback(url)
    workload = await served_workload(url, plan.workload)
    seed = plan.seed + 1000 * run_index
    probe = make_payloads(workload, 64, seed)
    # Warm-up, not measured: the first forwards of a fresh process pay for lazy initialisation.
    await measure_capacity(url, probe, plan.capacity_s / 4, plan.concurrency, plan.timeout_s)
    capacity = await measure_capacity(url, probe, plan.capacity_s, plan.concurrency, plan.timeout_s)
    rate = max(plan.overload * capacity, 1.0)
    send_times = poisson_send_times(rate, plan.duration_s, seed)
    payloads = make_payloads(workload, len(send_times), seed + 1)
    answers, samples = await open_loop(url, payloads, send_times, plan.timeout_s)
    settled_s = await wait_settled(url, plan.settle_s)
    return build_report(capacity, rate, answers, samples, settled_s, rss_mib())


def server_flags(model_path: str, max_running: int, max_queued: int, timeout_s: float) -> list[str]:
    """Small limits, so that overload reaches the queue cap and timeouts quickly."""
    return ["--model-path", model_path, "--dtype", "float32", "--max-running-requests",
            str(max_running), "--max-queued-requests", str(max_queued), "--max-items-per-request",
            str(min(16, max_queued)), "--request-timeout", str(timeout_s),
            # One torch thread: the client shares these cores; spinning OpenMP threads fighting
            # it for them made capacity swing 30x between runs here.
            "--num-threads", "1"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.reliability", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--model-path", default="default", help="what `python -m server` serves")
    add("--duration", type=float, default=60.0, help="seconds of open-loop load per run")
    add("--runs", type=int, default=3)
    add("--overload", type=float, default=2.0, help="open-loop rate / measured capacity")
    add("--capacity-seconds", type=float, default=5.0)
    add("--max-running-requests", type=int, default=4)
    add("--max-queued-requests", type=int, default=64)
    add("--request-timeout", type=float, default=2.0)
    add("--num-items", type=int, default=4)
    add("--query-tokens", type=int, default=48)
    add("--item-tokens", type=int, default=48)
    add("--label-ids", default="5,17")
    add("--seed", type=int, default=0)
    add("--json", action="store_true", help="print the reports as one JSON list")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    labels = tuple(int(x) for x in args.label_ids.split(","))
    plan = Plan(duration_s=args.duration, overload=args.overload, capacity_s=args.capacity_seconds,
                seed=args.seed,
                workload=Workload(args.num_items, args.query_tokens, args.item_tokens, labels))
    flags = server_flags(args.model_path, args.max_running_requests, args.max_queued_requests,
                         args.request_timeout)
    reports = []
    with start_server("server", flags, env={"HF_HUB_OFFLINE": "1"}) as server:
        server.wait_ready()
        print(f"server ready, RSS {server.rss_mib():.0f} MiB", file=sys.stderr)
        for i in range(args.runs):
            reports.append(asyncio.run(overload_run(server.url, plan, server.rss_mib, i)))
            print(f"run {i + 1}/{args.runs}: {reports[-1].by_status}", file=sys.stderr)
    if args.json:
        print(json.dumps([{k: v for k, v in asdict(r).items() if k not in ("answers", "samples")}
                          for r in reports]))
    else:
        print(format_reports(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
