"""Engine: the loop (take in, release, schedule, run, deliver) and the requests' futures.

The only module that knows both the scheduler and the model runner. Everything that touches the
scheduler runs on the event loop's thread; only runner.run() goes to a worker thread, so /metrics
and /get_load are served (and true) while a forward pass is computing.
"""
from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, Sequence as Seq

from server.config import ServerConfig
from server.errors import InternalError, RequestTimeout, ServiceUnavailable
from server.inputs import InputLimits, prepare
from server.metrics import ServerMetrics
from server.model_runner import RunResult
from server.scheduler import Batch, Load, QueueFull, Scheduler, SchedulerLimits
from server.schemas import ScoreRequest
from server.sequence import Request, Sequence

log = logging.getLogger(__name__)


class Runner(Protocol):
    vocab_size: int
    max_context_tokens: int

    def tokenize(self, text: str) -> list[int]: ...
    def run(self, sequences: Seq[Sequence]) -> RunResult: ...
    def keep_only(self, live_request_ids: set[int]) -> None: ...


@dataclass(frozen=True)
class ScoreResult:
    scores: list[list[float]]
    num_prompt_tokens: int


class Engine:
    def __init__(self, config: ServerConfig, runner: Runner) -> None:
        config = config.for_device(str(getattr(runner, "device", "cpu")).split(":")[0])
        self.config = config
        self.runner = runner
        self.scheduler = Scheduler(SchedulerLimits(
            max_running_requests=config.max_running_requests,
            max_prefill_tokens=config.max_prefill_tokens,
            max_total_tokens=config.max_total_tokens,
            max_queued_requests=config.max_queued_requests,
        ))
        self.input_limits = InputLimits(
            vocab_size=runner.vocab_size,
            max_context_tokens=runner.max_context_tokens,
            max_sequence_tokens=config.max_total_tokens,
            max_items_per_request=config.max_items_per_request,
        )
        self.metrics = ServerMetrics(config.model_name, config.max_total_tokens,
                                     self.scheduler.load)
        self.is_draining = False
        # One forward at a time, always on the same thread: oneDNN keeps per-thread caches warm
        # (+4% items/s over asyncio.to_thread's pool, docs/performance.md).
        self._forward_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forward")
        self._wakeup = asyncio.Event()
        self._loop_task: asyncio.Task | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop_task = asyncio.create_task(self._loop(), name="engine-loop")

    def begin_drain(self) -> None:
        """Stop admitting (503) and report not ready; admitted requests still finish."""
        self.is_draining = True

    async def stop(self, timeout_s: float = 30.0) -> None:
        """Drain what was admitted (up to timeout_s), then stop the loop."""
        self.begin_drain()
        deadline = time.monotonic() + timeout_s
        while self.load().num_reqs and time.monotonic() < deadline and self.is_loop_alive:
            await asyncio.sleep(0.05)
        if self._loop_task:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        self._forward_thread.shutdown(wait=False, cancel_futures=True)

    @property
    def is_loop_alive(self) -> bool:
        return self._loop_task is not None and not self._loop_task.done()

    @property
    def is_ready(self) -> bool:
        return self.is_loop_alive and not self.is_draining

    def load(self) -> Load:
        return self.scheduler.load()

    # -- requests --------------------------------------------------------------------------

    async def score(self, body: ScoreRequest) -> ScoreResult:
        """Score one request. Raises a ScoreError (400/503/504/500) with a message."""
        if not self.is_ready:
            reason = "shutting down" if self.is_draining else "not ready"
            raise ServiceUnavailable(f"server is {reason}; retry on another replica")
        prepared = prepare(body, self.runner.tokenize, self.input_limits)
        if not prepared.own_ids:
            return ScoreResult([], 0)
        request = Request.create(prepared.prefix_ids, prepared.own_ids, prepared.options)
        request.future = asyncio.get_running_loop().create_future()
        try:
            self.scheduler.add(request)
        except QueueFull as full:
            raise ServiceUnavailable(f"queue full: {full}", retry_after_s=1) from None
        self._wakeup.set()
        try:
            scores = await asyncio.wait_for(asyncio.shield(request.future),
                                            self.config.request_timeout_s)
        except asyncio.TimeoutError:
            self._abort(request)
            raise RequestTimeout(f"request did not finish within {self.config.request_timeout_s} s"
                                 ) from None
        except asyncio.CancelledError:  # the client went away
            self._abort(request)
            raise
        return ScoreResult(scores, request.num_prompt_tokens)

    def _abort(self, request: Request) -> None:
        self.scheduler.abort(request)
        if not request.future.done():
            request.future.cancel()
            self.metrics.observe_aborted()

    # -- the loop --------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            self.scheduler.release_finished()
            self.runner.keep_only(self.scheduler.live_request_ids())
            batch = self.scheduler.schedule()
            if batch is None:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            await self._run_batch(batch)

    async def _run_batch(self, batch: Batch) -> None:
        now = time.perf_counter()
        for request in batch.requests:
            if request.first_scheduled_s is None:
                request.first_scheduled_s = now
        try:
            result = await asyncio.get_running_loop().run_in_executor(
                self._forward_thread, self.runner.run, batch.sequences)
        except Exception as error:  # contained: only this batch's requests fail
            log.exception("forward pass failed for %d sequences", len(batch.sequences))
            self._fail_batch(batch, error)
            return
        self.metrics.observe_cached_tokens(result.num_cached_tokens)
        self.metrics.observe_computed_tokens(result.num_computed_tokens, result.num_padding_tokens)
        for seq, scores in zip(batch.sequences, result.scores):
            seq.finish(scores)
        self.scheduler.release_finished()
        finished_s = time.perf_counter()
        for request in batch.requests:
            if request.is_done and not request.future.done():
                request.future.set_result(request.scores)
                self.metrics.observe_finished(request.num_prompt_tokens,
                                              finished_s - request.arrival_s,
                                              request.first_scheduled_s - request.arrival_s)

    def _fail_batch(self, batch: Batch, error: Exception) -> None:
        for seq in batch.sequences:
            seq.finish(None)
        self.scheduler.release_finished()
        for request in batch.requests:
            self.scheduler.abort(request)
            if not request.future.done():
                request.future.set_exception(
                    InternalError(f"the forward pass failed: {type(error).__name__}: {error}"))
                self.metrics.observe_aborted()
