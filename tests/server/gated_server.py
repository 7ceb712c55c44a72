"""`python -m tests.server.gated_server [server flags]`: the real serving path of `python -m server`
(flags, app, DrainingServer, signals, exit code) over a fake model whose forward passes wait until
this process's stdin is closed. A test decides how long admitted work lasts: no timing, no hoping.
"""
from __future__ import annotations

import logging
import sys
import threading

from server.__main__ import serve
from server.config import parse_args
from server.engine import Engine
from tests.kit.runners import FakeRunner


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = parse_args(argv).resolve("cpu", "float32")
    gate = threading.Event()

    def open_gate_at_eof() -> None:
        sys.stdin.read()
        gate.set()

    threading.Thread(target=open_gate_at_eof, daemon=True).start()
    return serve(config, Engine(config, FakeRunner(gate=gate)))


if __name__ == "__main__":
    sys.exit(main())
