"""EngineStartup: the engine as the app and the drain see it from the process's first second.

While the model loads (on a thread of its own, so the event loop answers probes and scrapes) it
reports true zeros (no sequence can be admitted) and the loading state (`scoringfleet_model_loading
1`, the /get_load header), and answers readiness, scores and every model route with 503. Once
loaded it hands every call to the Engine. A model that fails to load is one ERROR line and
`load_failed` (the server then exits 2) before any score could be served. Owns the loading thread
and its outcome; nothing of scoring.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from server.config import ServerConfig
from server.engine import Engine
from server.errors import ModelLoadError, ServiceUnavailable
from server.interfaces import Runner
from server.metrics import ServerMetrics
from server.scheduler import Load

log = logging.getLogger("server")

NO_LOAD = Load(num_running=0, num_waiting=0, num_running_tokens=0, num_waiting_tokens=0)


class Loaded(NamedTuple):
    """What a load gives: the resolved config, the runner, and the rerank template it chose
    (server.rerank.Reranker; None: the model has none)."""

    config: ServerConfig
    runner: Runner
    reranker: Any = None


LoadFunction = Callable[[], tuple]  # (config, runner) or (config, runner, reranker): a Loaded


class EngineStartup:
    """A ScoringService (interfaces.py) from the process's first second."""

    def __init__(self, config: ServerConfig, load: LoadFunction,
                 on_ready: Callable[[Engine], None] | None = None) -> None:
        """`load()` runs on the loading thread and returns the resolved config and the runner
        (and the rerank template it chose, if any: a `Loaded`); it raises ModelLoadError (one
        line) for a model that cannot be served. `on_ready(engine)` runs on the event loop once
        the engine's loop is running."""
        self.config = config  # the resolved one once loaded (what /get_server_info reports)
        self._load, self._on_ready = load, on_ready
        self.engine: Engine | None = None
        self.load_failed = False
        self.is_draining = False
        self._loading_metrics = ServerMetrics(config.model_name, config.max_total_tokens,
                                              lambda: NO_LOAD, model_loading=True)
        self._task: asyncio.Task | None = None

    # -- what the app and the drain read ---------------------------------------------------

    @property
    def is_loading(self) -> bool:
        return self.engine is None

    @property
    def is_ready(self) -> bool:
        return self.engine is not None and self.engine.is_ready

    @property
    def metrics(self) -> ServerMetrics:
        return self._loading_metrics if self.engine is None else self.engine.metrics

    @property
    def input_limits(self):
        return self._loaded().input_limits

    @property
    def runner(self) -> Runner:
        return self._loaded().runner

    @property
    def special_tokens(self):
        return self._loaded().special_tokens

    @property
    def reranker(self):
        """The rerank template the load chose (None: none for this model); 503 while loading."""
        return self._loaded().reranker

    def load(self) -> Load:
        return NO_LOAD if self.engine is None else self.engine.load()

    async def score(self, body, adapter: str | None = None):
        return await self._loaded().score(body, adapter)

    def _loaded(self) -> Engine:
        if self.engine is None:
            # Connection: close, as a draining engine does: the client retries on another replica.
            raise ServiceUnavailable("the model is loading; retry on another replica",
                                     close_connection=True)
        return self.engine

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Begin loading and return at once: the server listens while the model loads."""
        self._task = asyncio.create_task(self._load_and_start(), name="model-load")

    def begin_drain(self) -> None:
        self.is_draining = True
        if self.engine is not None:
            self.engine.begin_drain()

    async def stop(self) -> None:
        self.is_draining = True
        if self._task is not None and not self._task.done():
            self._task.cancel()  # the loading thread is a daemon: it ends with the process
            await asyncio.gather(self._task, return_exceptions=True)
        if self.engine is not None:
            await self.engine.stop()

    async def _load_and_start(self) -> None:
        try:
            config, runner, reranker = Loaded(*await _in_daemon_thread(self._load))
        except Exception as error:  # noqa: BLE001 - whatever it is, the process must end (exit 2)
            if isinstance(error, ModelLoadError):
                log.error("%s", error)
            else:
                log.exception("loading the model failed")
            self.load_failed = True
            return
        engine = Engine(config, runner, reranker)
        if self.is_draining:  # a SIGTERM came while loading
            engine.begin_drain()
        await engine.start()
        self.config, self.engine = config, engine
        if self._on_ready is not None:
            self._on_ready(engine)


async def _in_daemon_thread(function: Callable):
    """function() on a daemon thread, awaited. NOTE: not asyncio.to_thread: its pool's threads
    are joined at exit, so a SIGTERM during a minutes-long load would wait for the load to end."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result=None, error: BaseException | None = None) -> None:
        if future.done():  # cancelled meanwhile
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        try:
            outcome = (function(), None)
        except BaseException as error:  # noqa: BLE001 - handed to the awaiting task as it is
            outcome = (None, error)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop has closed: the server stopped while this loaded
            pass

    threading.Thread(target=run, name="model-load", daemon=True).start()
    return await future
