"""A scoring server whose "model" takes wall time but no CPU: every batch sleeps
batch_s + sequence_s * its sequences (the way a GPU keeps a worker busy while its CPU idles), so a
2-core machine can host several busy workers and a router's choices show in the latencies. It serves
as `python -m server` does (server.__main__.serve: the SIGTERM drain, the exit code).

  python -m bench.paced_server --port 30101 --batch-s 0.005 --sequence-s 0.004 [server flags]

With --load-s S its "model" takes S seconds to load, as `python -m server` loads one (startup.py:
listening, loading state, 503 for scores until loaded).
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass

from bench.free_server import FreeRunner
from server.__main__ import serve
from server.config import parse_args
from server.engine import Engine
from server.rerank import Reranker
from server.rerank_templates import load_template
from server.startup import EngineStartup, Loaded


@dataclass(frozen=True)
class PacedRunner(FreeRunner):
    batch_s: float = 0.0
    sequence_s: float = 0.0

    def run(self, sequences):
        time.sleep(self.batch_s + self.sequence_s * len(sequences))
        return super().run(sequences)


def main(argv: list[str] | None = None) -> int:
    front = argparse.ArgumentParser(add_help=False)
    front.add_argument("--batch-s", type=float, default=0.0, help="seconds every batch takes")
    front.add_argument("--sequence-s", type=float, default=0.0, help="plus seconds per sequence")
    front.add_argument("--load-s", type=float, default=0.0, help="seconds the model takes to load")
    pace, rest = front.parse_known_args(argv)
    config = parse_args(rest).resolve("cpu", "float32")  # the pace is the model: CPU defaults
    runner = PacedRunner(batch_s=pace.batch_s, sequence_s=pace.sequence_s)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The drain's lines, not a line per request: a benchmark's client shares the CPU.
    logging.getLogger("uvicorn.access").addFilter(lambda record: False)
    # /v1/rerank only with --rerank-template: the runner's tokenizer is a token per character, so
    # the template's labels must be one character each.
    reranker = (Reranker.create(load_template(config.rerank_template), runner.tokenize)
                if config.rerank_template else None)
    if pace.load_s <= 0:
        return serve(config, Engine(config, runner), reranker)

    def load():
        time.sleep(pace.load_s)
        return Loaded(config, runner, reranker)
    return serve(config, EngineStartup(config, load))


if __name__ == "__main__":
    sys.exit(main())
