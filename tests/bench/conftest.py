"""Fixtures for the benchmark smoke tests: the real app and scheduler over a runner that costs
nothing (or holds each batch a moment: the paced server's runner), served by uvicorn on 127.0.0.1
in a thread (tests.kit.servers.serving)."""
from __future__ import annotations

import pytest

from bench.free_server import FreeRunner
from bench.paced_server import PacedRunner
from tests.kit.servers import serving

# Long enough that /get_load can be seen reporting running and waiting sequences.
HOLD_S = 0.3


@pytest.fixture
def free_url():
    with serving(FreeRunner()) as (url, _):
        yield url


@pytest.fixture
def holding_url():
    with serving(PacedRunner(batch_s=HOLD_S)) as (url, _):
        yield url
