"""A cold start, measured: from a request arriving at a fleet at zero to its answer, with the model on
a warm cache volume vs a cold one.

  python -m bench.cold_start [--model-path default|DIR|FILE.gguf] [--runs 3] \
      [--download-mb-per-s 0] [--threads 2] [--json]

What one run of one case does, on loopback: the fleet's gateway is up (`python -m gateway
--worker-urls <the pod's address> --queue-timeout 300`) and no server is (a fleet at zero). At t0
one /v1/score request goes to the gateway, which holds it, and the pod "wakes": in the cold case its
cache volume (a fresh folder standing in for the pod's HF_HOME) is empty, so the model is first
copied into it from `--model-path` (a local folder standing in for the hub; `--download-mb-per-s`
paces the copy at a hub download's speed, 0: as fast as the disk), then `python -m server` starts
on the cached copy; in the warm case the cache already holds the model (copied before t0) and the
server starts at once. The answer's time is the request's whole wait. The server's own log gives
the load and its time to ready (server/__main__.py).

Not included, and honest about it: on a cluster the operator's scale-from-zero decision (one
scrape interval), scheduling, the image pull and the container start come before the server's
start, and a real hub download is network-bound (minutes for a 1-8 B model, which is what the
cache saves). Here the "hub" is a local folder, likely in the page cache, so an unpaced cold copy
is the disk's speed: the gap it shows is the least a cold cache costs.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp

from bench.server_process import ServerProcess, free_port, start_server

CASES = ("cold", "warm")
QUEUE_TIMEOUT_S = 300  # the fleet's gateway.queueTimeoutSeconds default
CHUNK_BYTES = 1 << 20
BODY = {"query": "What is the capital of France?", "items": ["Paris", "Lyon"], "label_token_ids": [1, 2]}


@dataclass(frozen=True)
class Wake:
    """One measured cold start."""

    case: str
    run: int
    status: int
    answer_s: float  # the request's arrival at the gateway -> its answer
    download_s: float  # copying the model into the cache volume (0 when warm)
    model_mib: float
    load_s: float | None  # the server's "model ... loaded in" line
    ready_s: float | None  # the server's "ready in ... after start" line


def server_times(log: str) -> tuple[float | None, float | None]:
    """(load, ready after start) in seconds from a server's log; None for a line not there."""
    loaded = re.search(r"model \S+ loaded in (\d+(?:\.\d+)?) s", log)
    ready = re.search(r"ready in (\d+(?:\.\d+)?) s after start", log)
    return (float(loaded[1]) if loaded else None), (float(ready[1]) if ready else None)


def model_bytes(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.rglob("*")
                                                           if f.is_file())


def copy_paced(source: Path, target: Path, mb_per_s: float) -> None:
    """Copy a file or a folder; with mb_per_s > 0 no faster than that (a download's pace)."""
    files = [source] if source.is_file() else sorted(f for f in source.rglob("*") if f.is_file())
    started, done = time.monotonic(), 0
    for file in files:
        out = target / (file.name if source.is_file() else file.relative_to(source))
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(file, "rb") as src, open(out, "wb") as dst:
            while chunk := src.read(CHUNK_BYTES):
                dst.write(chunk)
                done += len(chunk)
                if mb_per_s > 0:
                    time.sleep(max(0.0, started + done / (mb_per_s * 1e6) - time.monotonic()))


def cached_path(source: Path, cache: Path) -> Path:
    """Where the model lies in the cache volume once there (a .gguf file keeps its name)."""
    return cache / "models" / source.name


async def _score(url: str) -> int:
    timeout = aiohttp.ClientTimeout(total=QUEUE_TIMEOUT_S + 60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.post(f"{url}/v1/score", json=BODY) as response:
            await response.read()
            return response.status


def measure(case: str, run: int, source: Path, args: argparse.Namespace) -> Wake:
    """One wake from zero of one case (module docstring)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix=f"cold-start-{case}-") as cache_dir, \
            start_server("gateway", ["--worker-urls", f"http://127.0.0.1:{port}",
                                     "--queue-timeout", str(QUEUE_TIMEOUT_S)]) as gateway:
        cache = Path(cache_dir)
        target = cached_path(source, cache)
        (target.parent if source.is_file() else target).mkdir(parents=True, exist_ok=True)
        if case == "warm":  # the volume kept the model from an earlier pod
            copy_paced(source, target.parent if source.is_file() else target, 0)
        gateway.wait_ready(60, path="/health")  # up: /ready stays 503 with no worker yet
        answer: list[int] = []
        started = time.monotonic()
        sender = threading.Thread(target=lambda: answer.append(asyncio.run(_score(gateway.url))))
        sender.start()
        download_s = 0.0
        if case == "cold":
            copy_paced(source, target.parent if source.is_file() else target, args.download_mb_per_s)
            download_s = time.monotonic() - started
        server_args = ["--model-path", str(target), "--port", str(port), "--dtype", args.dtype,
                       "--num-threads", str(args.threads)]
        with start_server("server", server_args, env={"HF_HOME": str(cache), "HF_HUB_OFFLINE": "1"}) as server:
            sender.join(timeout=QUEUE_TIMEOUT_S + 90)
            answer_s = time.monotonic() - started
            load_s, ready_s = server_times(_log(server))
    return Wake(case, run, answer[0] if answer else 0, answer_s, download_s,
                model_bytes(source) / 2**20, load_s, ready_s)


def _log(server: ServerProcess) -> str:
    return server.log_path.read_text(errors="replace")


def format_table(wakes: list[Wake]) -> str:
    lines = ["| case | run | status | request -> answer (s) | download (s) | model load (s) | "
             "server ready after start (s) | wake -> pod ready (s) | ready -> answer (s) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for w in wakes:
        # the server starts once the download ends: what is left is the gateway's poll seeing it
        # ready, and the first request's own forward
        pod_ready = None if w.ready_s is None else w.download_s + w.ready_s
        after = None if pod_ready is None else w.answer_s - pod_ready
        lines.append(f"| {w.case} | {w.run} | {w.status} | {w.answer_s:.2f} | {w.download_s:.2f} | "
                     f"{_fmt(w.load_s)} | {_fmt(w.ready_s)} | {_fmt(pod_ready)} | {_fmt(after)} |")
    medians = {case: statistics.median(w.answer_s for w in wakes if w.case == case)
               for case in CASES if any(w.case == case for w in wakes)}
    if len(medians) == 2:
        lines.append(f"\nmedian request -> answer: cold {medians['cold']:.2f} s, warm "
                     f"{medians['warm']:.2f} s, cold / warm {medians['cold'] / medians['warm']:.2f}")
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def resolve_source(model_path: str) -> Path:
    if model_path == "default":
        from server.model_loader import default_model_file  # torch: only when asked for
        return default_model_file()
    path = Path(model_path)
    if not path.exists():
        raise SystemExit(f"--model-path {model_path}: no such file or folder (the local 'hub')")
    return path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.cold_start", description=__doc__.split("\n")[0])
    parser.add_argument("--model-path", default="default",
                        help="the local folder or .gguf standing in for the hub (default: embedded SmolLM2)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--download-mb-per-s", type=float, default=0.0,
                        help="pace the cold copy like a hub download (0: the disk's speed)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    source = resolve_source(args.model_path)
    print(f"model {source} ({model_bytes(source) / 2**20:.0f} MiB), {args.runs} runs, download pace "
          f"{args.download_mb_per_s or 'disk speed'} MB/s", file=sys.stderr)
    wakes = []
    for run in range(1, args.runs + 1):
        for case in CASES:  # interleaved: the machine's load drifts over a run
            wakes.append(measure(case, run, source, args))
            print(f"  {case} run {run}: {wakes[-1].answer_s:.2f} s", file=sys.stderr)
    print(json.dumps([asdict(w) for w in wakes]) if args.json else format_table(wakes))
    return 0 if all(w.status == 200 for w in wakes) else 1


if __name__ == "__main__":
    sys.exit(main())
