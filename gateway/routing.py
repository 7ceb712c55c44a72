"""Router: one /v1/score (or rerank) request from arrival to answer: choose a worker (waiting if none is
fresh), forward, and retry once on another worker when that is safe.

Retried: refused, no connection within the connect timeout, reset before any response byte, a
503 (full or draining). Never a 4xx, a 500 or a 504: those are answers. Scoring is idempotent, so
a retried request is never done twice in a way a client can see. A worker that did no work
because it is leaving (a draining 503, a refused connection once it has exited, a connect timeout
once it has vanished), or that refuses the gateway's API key (a 401 to the gateway's own key,
which marks it not ready), does not use up the retry: the request moves on to a worker it has not
tried. On a scale-in several workers leave at once, and stay in rotation until the watch event
that drops them arrives.
"""
from __future__ import annotations

import random
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import aiohttp

from gateway import affinity
from gateway.config import GatewayConfig
from gateway.errors import error_reply
from gateway.intake import count_sequences, parse_body
from gateway.metrics import GatewayMetrics
from gateway.policies import RoutingPolicy, make_policy
from gateway.proxy import BrokenAnswer, Unreachable, Upstream, forward
from gateway.tokens import NO_SHAPE, Shape, TextRatio, prompt_tokens, shape_of
from gateway.waiting import WaitingRoom, WaitingRoomFull
from gateway.workers import Worker, WorkerRegistry
from scoringfleet_contract.facts import SCORE_PATH

# Unreachable because it has exited (refused) or vanished (its IP drops packets), or it refuses the
# gateway's API key: a worker that did no work, tried at most once, without using up the request's
# one retry.
LEAVING_REASONS = ("refused", "connect-timeout", "unauthorized")


@dataclass(frozen=True)
class Request:
    """One client request as the router forwards it (and sizes it)."""

    body: bytes
    path: str
    num_sequences: int
    key: str | None  # its query's (affinity.query_key)
    shape: Shape
    adapter: str | None = None  # the adapter it names (served.Route.adapter)


def with_adapter(workers: list[Worker], adapter: str | None) -> list[Worker]:
    """The workers whose /v1/models lists `adapter` (loaded there: no load on the way), or all of
    them when none does (or no adapter is named): any worker of the fleet may still serve it."""
    listing = [w for w in workers if adapter is not None and w.models is not None and adapter in w.models]
    return listing or workers


class Router:
    def __init__(self, config: GatewayConfig, registry: WorkerRegistry, waiting: WaitingRoom,
                 metrics: GatewayMetrics, session: aiohttp.ClientSession,
                 rng: random.Random | None = None) -> None:
        self.config, self.registry, self.waiting = config, registry, waiting
        self.metrics, self.session = metrics, session
        # the one object that knows the policy (its state: a turn, or who holds which query)
        self.policy: RoutingPolicy = make_policy(config, rng)
        self.text_ratio = TextRatio()  # characters per token of text requests, from the answers

    def choose(self, exclude: Collection[str] = (), key: str | None = None,
               shape: Shape = NO_SHAPE, adapter: str | None = None) -> Worker | None:
        """A fresh worker not in `exclude` for a request whose query has `key` (and of `shape`,
        naming `adapter`); a retry (exclude given) keeps the round-robin turn."""
        choice = self._choose(exclude, key, shape, adapter)
        return choice.worker if choice is not None else None

    def _choose(self, exclude: Collection[str], key: str | None, shape: Shape,
                adapter: str | None = None) -> affinity.Choice | None:
        fresh = with_adapter([w for w in self.registry.fresh(time.monotonic()) if w.url not in exclude], adapter)
        choice = self.policy.choose(fresh, key, self.text_ratio.size(shape), is_retry=bool(exclude))
        if choice is not None and choice.outcome:  # cache_aware's outcomes only
            self.metrics.affinity.labels(outcome=choice.outcome).inc()
        return choice

    def forget_workers(self, urls) -> None:
        """Workers that left the rotation or may have restarted: their queries go with them."""
        self.policy.forget(urls)

    async def route(self, body: bytes, headers: Mapping[str, str], num_sequences: int | None = None,
                    path: str = SCORE_PATH, key: str | None = None, shape: Shape = NO_SHAPE,
                    adapter: str | None = None) -> Upstream:
        """The answer for the client: a worker's (unchanged) or the gateway's own error.
        `headers` are those to send upstream; num_sequences None: counted from the body (which
        must then be JSON: intake.parse_body, and then the query's key and the shape too); `path`
        the worker's (a rerank's is scored alike); `key` the query's (affinity.query_key), `shape`
        its size (tokens.shape_of), `adapter` the one its model names (its workers preferred)."""
        if num_sequences is None:
            payload = parse_body(body)
            num_sequences, key, shape = count_sequences(payload), affinity.query_key(payload), shape_of(payload)
        request = Request(body, path, num_sequences, key, shape, adapter)
        # One deadline per request: all its waits for a worker together last at most the queue
        # timeout, counted from arrival.
        deadline_s = time.monotonic() + self.config.queue_timeout_s
        try:
            choice = await self.waiting.take(lambda: self._choose((), key, shape, adapter),
                                           self.config.queue_timeout_s)
        except WaitingRoomFull as error:
            return error_reply(503, str(error), error.retry_after_s)
        if choice is None:
            return self._no_worker()
        tried: set[str] = set()
        outcome = await self._attempt_past_leaving(choice, request, headers, tried)
        if isinstance(outcome, Upstream) and outcome.status != 503:
            return outcome
        retry = await self._retry_worker(tried, isinstance(outcome, Upstream), deadline_s, request)
        if retry is None:
            return outcome if isinstance(outcome, Upstream) else self._none_left(tried, outcome)
        reason = "503" if isinstance(outcome, Upstream) else outcome.reason
        self.metrics.retries.labels(reason=reason).inc()  # counted only once the retry is made
        second = await self._attempt_past_leaving(retry, request, headers, tried)
        if isinstance(second, Unreachable):
            return error_reply(502, f"no worker answered: {second}", 1)
        return second

    async def _retry_worker(self, tried: set[str], answered: bool, deadline_s: float,
                            request: Request) -> affinity.Choice | None:
        # A worker that answered 503 is alive and its 503 is a fine answer: take another worker
        # only if one is ready now. One that did not answer is no answer: wait for another, until
        # the request's deadline, but only if the rotation has a worker not yet tried at all.
        if answered or not any(url not in tried for url in self.registry.urls()):
            return self._choose(tried, request.key, request.shape, request.adapter)
        try:
            return await self.waiting.take(lambda: self._choose(tried, request.key, request.shape, request.adapter),
                                           max(deadline_s - time.monotonic(), 0.0))
        except WaitingRoomFull:
            return None

    async def _attempt_past_leaving(self, choice: affinity.Choice, request: Request,
                                    headers: Mapping[str, str], tried: set[str]) -> Upstream | Unreachable:
        """An attempt on the chosen worker, then, while the worker is leaving (a draining 503,
        refused or a connect timeout), on a fresh worker not yet tried (so at most once each); the
        last outcome if none is left."""
        while True:
            tried.add(choice.worker.url)
            outcome = await self._attempt(choice, request, headers)
            leaving = ("draining" if isinstance(outcome, Upstream) and outcome.draining else
                       outcome.reason if isinstance(outcome, Unreachable)
                       and outcome.reason in LEAVING_REASONS else None)
            next_choice = self._choose(tried, request.key, request.shape, request.adapter) if leaving else None
            if next_choice is None:
                return outcome
            self.metrics.retries.labels(reason=leaving).inc()
            choice = next_choice

    async def _attempt(self, choice: affinity.Choice, request: Request,
                       headers: Mapping[str, str]) -> Upstream | Unreachable:
        worker, path = choice.worker, request.path
        # Counted before the first await: the next request's choice, made meanwhile, sees it.
        sent_at = time.monotonic()
        self.registry.record_sent(worker.url, request.num_sequences, choice.cost_tokens, sent_at)
        self.metrics.routed.labels(worker=worker.url).inc()
        answered_at = None
        try:
            answer = await forward(self.session, worker.url, request.body, headers,
                                   self.config.request_timeout_s, path)
            answered_at = time.monotonic() if answer.status == 200 else None
        except Unreachable as error:
            self.registry.record_failure(worker.url, f"{path} unreachable: {error}")
            return error
        except BrokenAnswer as error:
            return error_reply(502, str(error))
        except TimeoutError:
            return error_reply(504, f"{worker.url} did not answer within {self.config.request_timeout_s} s")
        finally:
            self.registry.record_done(worker.url, choice.cost_tokens, answered_at)
        if answered_at is not None:
            self._learn(choice, request, answer, answered_at - sent_at)
        if answer.draining:
            self.registry.record_draining(worker.url)
        if answer.status == 401 and self.config.api_key is not None:
            # The client passed the gateway's check and the gateway sent its own key: the worker
            # has another one. Not the client's fault: the worker is out until it takes the key.
            self.registry.record_key(worker.url, False)
            return Unreachable("unauthorized", f"{worker.url} rejects the gateway's API key (401)")
        return answer

    def _learn(self, choice: affinity.Choice, request: Request, answer: Upstream, took_s: float) -> None:
        """An answered request: how far its predicted finish was off, and (text) the characters
        per token its worker counted."""
        if choice.finish_s > 0:  # a prediction was made (cache_aware)
            self.metrics.finish_estimate.observe(took_s / choice.finish_s)
        if request.shape.is_text:
            self.text_ratio.learn(request.shape, prompt_tokens(answer.body))

    def _none_left(self, tried: set[str], outcome: Unreachable) -> Upstream:
        return error_reply(503, f"no worker answered and none other is ready (tried {len(tried)}; "
                                f"last: {outcome})", 1)

    def _no_worker(self) -> Upstream:
        return error_reply(503, f"no ready worker within {self.config.queue_timeout_s} s", 1)
