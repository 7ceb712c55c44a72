"""`python -m bench.compile_start`: how long a server takes to be ready, eager against compiled on
a cold and then a warm compile cache, in one run, one process at a time.

  python -m bench.compile_start [--model-path default] [--dtype auto] [--threads N] [--runs 1]

Each case starts `python -m server` and times it from the process start to its first 200 on
readiness (wall clock, what a startup probe sees), and reads what it did from /get_server_info:
  eager, new volume  --compile off, a fresh --compile-cache-dir (where our attention kernel runs,
                     an eager server builds it there first: once a volume)
  eager              --compile off again, the kernel's library on the volume
  cold               --compile on, nothing of the compile cached
  warm               --compile auto, the same folder again (auto compiles because the cache is warm)
  from the image     --compile auto on a new, empty folder, the warm one as the image's compile
                     cache (SCORINGFLEET_IMAGE_COMPILE_CACHE): what a pod of an image built with
                     the model baked in does on a node of the build host's kind, without a volume
The issue's bar: warm within 60 s of eager. The machine's load is printed with the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request

from bench.ceiling import processor
from bench.server_process import start_server
from server.compile_cache import IMAGE_ROOT_ENV

CASES = (("eager, new volume", "off"), ("eager", "off"), ("cold", "on"), ("warm", "auto"), ("from the image", "auto"))


def ready_after_s(args: argparse.Namespace, mode: str, cache_dir: str,
                  env: dict[str, str] | None = None) -> tuple[float, str]:
    flags = ["--model-path", args.model_path, "--dtype", args.dtype, "--compile", mode,
             "--compile-cache-dir", cache_dir,
             *(["--num-threads", str(args.threads)] if args.threads else [])]
    started = time.monotonic()
    with start_server("server", flags, env=env) as server:
        server.wait_ready(1800)
        elapsed = time.monotonic() - started
        with urllib.request.urlopen(server.url + "/get_server_info", timeout=10) as response:
            info = json.load(response)
    return elapsed, f"{info['compile']} ({info['compile_reason']}), {info['dtype']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compile_start", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-path", default="default")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--runs", type=int, default=1, help="rounds of the cases")
    args = parser.parse_args(argv)
    lines = [f"{processor()}; load average before: {os.getloadavg()[0]:.1f}",
             "| run | case | ready after (s) | what the server did |", "|---|---|---|---|"]
    for run in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="compile-cache-") as cache_dir:
            times = {}
            for case, mode in CASES:
                if case == "from the image":
                    with tempfile.TemporaryDirectory(prefix="compile-cache-") as empty_volume:
                        times[case], did = ready_after_s(args, mode, empty_volume, {IMAGE_ROOT_ENV: cache_dir})
                else:
                    times[case], did = ready_after_s(args, mode, cache_dir)
                lines.append(f"| {run} | {case} | {times[case]:.1f} | {did} |")
                print(lines[-1], file=sys.stderr, flush=True)
        lines.append(f"| {run} | warm - eager | {times['warm'] - times['eager']:+.1f} | |")
    lines.append(f"load average after: {os.getloadavg()[0]:.1f}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
