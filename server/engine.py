"""Engine: the loop (take in, schedule, run, report the batch's end, deliver) and the futures.

The only module that knows both the scheduler and the model runner; it tells the scheduler how a
batch ended (finish/fail) and never writes a sequence's status itself. Everything that touches the
scheduler runs on the event loop's thread; only runner.run() goes to a worker thread, so /metrics
and /get_load are served (and true) while a forward pass is computing.
"""
from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from server.classifier import Classifier
from server.config import ServerConfig
from server.errors import InternalError, RequestTimeout, ServiceUnavailable
from server.inputs import InputLimits, prepare
from server.interfaces import Runner, ScoreResult
from server.metrics import ServerMetrics
from server.rerank import Reranker
from server.scheduler import Batch, Load, QueueFull, Scheduler, SchedulerLimits
from server.schemas import ScoreRequest
from server.sequence import Request

log = logging.getLogger(__name__)


class Engine:
    """A ScoringService (interfaces.py) whose model is loaded (startup.EngineStartup is the one
    that answers while it loads)."""

    is_loading = False
    load_failed = False

    def __init__(self, config: ServerConfig, runner: Runner, reranker: Reranker | Classifier | None = None) -> None:
        """`config` is the effective one (config.resolve() already ran), the same the app reads;
        `reranker` the model's head as the load chose it (a rerank template or a classifier's), if
        any."""
        if not config.is_resolved:
            raise ValueError("the engine needs a resolved config: call config.resolve(device, "
                             "dtype) first")
        self.config = config
        self.runner = runner
        self.reranker = reranker
        self.scheduler = Scheduler(SchedulerLimits(
            max_running_requests=config.max_running_requests,
            max_prefill_tokens=config.max_prefill_tokens,
            max_total_tokens=config.max_total_tokens,
            max_queued_requests=config.max_queued_requests,
            count_query_once=runner.shares_query_in_forward,
        ))
        self.input_limits = InputLimits(
            vocab_size=runner.vocab_size,
            max_context_tokens=runner.max_context_tokens,
            max_sequence_tokens=config.max_total_tokens,
            max_items_per_request=config.max_items_per_request,
        )
        self.special_tokens = runner.special_tokens
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

    async def stop(self) -> None:
        """Stop the loop; whatever is still admitted gets 503 (retry elsewhere). Idempotent. The
        drain (waiting for admitted work) is the server's job and happens before this."""
        self.begin_drain()
        if self._loop_task:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
        for request in self.scheduler.abort_all():
            self._reject(request, ServiceUnavailable(
                "server stopped before this request finished; retry on another replica",
                close_connection=True))
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

    async def score(self, body: ScoreRequest, adapter: str | None = None) -> ScoreResult:
        """Score one request, through the LoRA adapter so named (None: the base model; the name
        one the runner loaded: served_models.py resolved it). Raises a ScoreError
        (400/503/504/500) with a message."""
        if not self.is_ready:
            reason = "shutting down" if self.is_draining else "not ready"
            # Connection: close, so that a client on a kept-alive connection reconnects (through
            # its load balancer, to another replica) rather than coming back here.
            raise ServiceUnavailable(f"server is {reason}; retry on another replica",
                                     close_connection=True)
        prepared = prepare(body, self.runner.tokenize, self.input_limits, self.special_tokens)
        if not prepared.own_ids:
            return ScoreResult([], 0)
        request = Request.create(prepared.prefix_ids, prepared.own_ids, prepared.options, adapter)
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

    def _reject(self, request: Request, error: Exception) -> None:
        if not request.future.done():
            request.future.set_exception(error)
            self.metrics.observe_aborted()

    # -- the loop --------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
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
            message = f"the forward pass failed: {type(error).__name__}: {error}"
            for request in self.scheduler.fail(batch):
                self._reject(request, InternalError(message))
            return
        self.metrics.observe_cached_tokens(result.num_cached_tokens)
        self.metrics.observe_computed_tokens(result.num_computed_tokens, result.num_padding_tokens)
        finished_s = time.perf_counter()
        for request in self.scheduler.finish(batch, result.scores):
            if not request.future.done():  # not timed out or disconnected meanwhile
                request.future.set_result(request.scores)
                self.metrics.observe_finished(len(request.sequences), request.num_prompt_tokens,
                                              finished_s - request.arrival_s,
                                              request.first_scheduled_s - request.arrival_s)
