"""`python -m tests.gateway.worker_process --hold-s S [server flags]`: the real scoring app and
scheduler over a runner that costs nothing but holds every batch S seconds (a sleep), so that a
test can kill a worker with requests in flight, as a separate process."""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import uvicorn

from bench.free_server import FreeRunner
from server.app import create_app
from server.config import parse_args
from server.engine import Engine


@dataclass(frozen=True)
class HoldingRunner(FreeRunner):
    hold_s: float = 0.0

    def run(self, sequences):
        time.sleep(self.hold_s)
        return super().run(sequences)


def main(argv: list[str] | None = None) -> int:
    front = argparse.ArgumentParser(add_help=False)
    front.add_argument("--hold-s", type=float, default=0.0)
    known, rest = front.parse_known_args(argv)
    config = parse_args(rest)
    app = create_app(config, Engine(config, HoldingRunner(hold_s=known.hold_s)))
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
