"""`python -m tests.reliability.paced_fleet --port P --batch-s S [--load-s L] --log-dir D HOST...`: one paced
scoring server (bench.paced_server: the real app, scheduler and SIGTERM drain) per host, each its
own process forked from this one after the server's imports, so a fleet pays for one torch import,
not one per server (seconds of CPU each on a small machine).

Prints `pid HOST PID` for each server once forked and `exit PID CODE` as each ends; exits when all
have. SIGTERM to this process is passed on to every server still running.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time

from bench.paced_server import PacedRunner
from server.__main__ import serve
from server.config import parse_args
from server.engine import Engine
from server.startup import EngineStartup


def run_server(host: str, args: argparse.Namespace) -> int:
    """In the forked child: the server on host:port until its drain ends; its exit code."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # uvicorn installs the drain's handler
    log_fd = os.open(os.path.join(args.log_dir, f"{host}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("uvicorn.access").addFilter(lambda record: False)
    config = parse_args(["--host", host, "--port", str(args.port)]).resolve("cpu", "float32")
    runner = PacedRunner(batch_s=args.batch_s)
    if args.load_s <= 0:
        return serve(config, Engine(config, runner))

    def load():  # a "model" that takes load_s to load, as `python -m server` loads one
        time.sleep(args.load_s)
        return config, runner
    return serve(config, EngineStartup(config, load))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("hosts", nargs="+")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--batch-s", type=float, default=0.1)
    parser.add_argument("--load-s", type=float, default=0.0,
                        help="seconds each server's model takes to load (listening meanwhile)")
    parser.add_argument("--log-dir", required=True)
    args = parser.parse_args(argv)
    running: dict[int, str] = {}
    for host in args.hosts:
        sys.stdout.flush()  # the child must not print the parent's buffered lines again
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = run_server(host, args)
            finally:
                os._exit(code)
        running[pid] = host
        print(f"pid {host} {pid}", flush=True)

    def pass_on(sig: int, _frame) -> None:
        for child in list(running):
            try:
                os.kill(child, sig)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, pass_on)
    while running:
        pid, status = os.wait()
        running.pop(pid, None)
        print(f"exit {pid} {os.waitstatus_to_exitcode(status)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
