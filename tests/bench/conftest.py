"""Fixtures for the benchmark smoke tests: the real app and scheduler over a runner that costs
nothing (or holds each batch a moment), served by uvicorn on 127.0.0.1 in a thread."""
from __future__ import annotations

import contextlib
import time

import pytest

from bench.free_server import FreeRunner
from bench.server_process import free_port
from server.config import ServerConfig
from server.engine import Engine
from tests.server.support import live_server


class HoldingRunner(FreeRunner):
    """A FreeRunner whose every batch takes hold_s of wall time (a sleep, not arithmetic), so that
    /get_load can be seen reporting running and waiting sequences."""

    hold_s = 0.3

    def run(self, sequences):
        time.sleep(self.hold_s)
        return super().run(sequences)


@contextlib.contextmanager
def serve(runner):
    config = ServerConfig(host="127.0.0.1", port=free_port()).resolve("cpu", "float32")
    with live_server(config, Engine(config, runner)) as url:
        yield url


@pytest.fixture
def free_url():
    with serve(FreeRunner()) as url:
        yield url


@pytest.fixture
def holding_url():
    with serve(HoldingRunner()) as url:
        yield url
