"""A scoring server for tests: in this process over a runner (the app, scheduler and uvicorn settings
of `python -m server`), or as a subprocess (its environment, its readiness)."""
from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time

import httpx

from bench.server_process import free_port
from server.app import create_app
from server.config import ServerConfig
from server.connections import uvicorn_config
from server.drain import DrainingServer
from server.engine import Engine
from tests.kit.waiting import wait_for


@contextlib.contextmanager
def live_server(config: ServerConfig, engine: Engine, reranker=None):
    """Serve create_app(config, engine, reranker) on 127.0.0.1 in a thread, with the uvicorn settings
    and server class of `python -m server` (signals stay with the main thread); yield its base URL."""
    server = DrainingServer(uvicorn_config(create_app(config, engine, reranker), config, "warning"),
                            engine, config.drain_timeout_s)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://{config.host}:{config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def cpu_config(**settings) -> ServerConfig:
    """A resolved ServerConfig for a fake runner (CPU defaults); `settings` are its fields."""
    return ServerConfig(**settings).resolve("cpu", "float32")


@contextlib.contextmanager
def serving(runner, reranker=None, **settings):
    """An Engine over `runner` behind a live uvicorn server on a free 127.0.0.1 port (with
    /v1/rerank when a `reranker` is given). Yields (base_url, engine); `settings` are ServerConfig
    fields."""
    config = cpu_config(port=free_port(), **settings)
    engine = Engine(config, runner)
    with live_server(config, engine, reranker) as url:
        yield url, engine


def server_env() -> dict[str, str]:
    """The environment for a server subprocess. Never reach for the hub: a test model is a folder."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1"}


def wait_ready(process: subprocess.Popen, url: str, timeout_s: float = 60) -> None:
    """Poll readiness until 200 (bounded); fails at once if the process exits meanwhile."""
    def ready() -> bool:
        assert process.poll() is None, "the server exited during startup"
        try:
            return httpx.get(f"{url}/health_generate", timeout=1).status_code == 200
        except httpx.TransportError:
            return False
    wait_for(ready, "the server to be ready", timeout_s=timeout_s, interval_s=0.1)
