"""GatewayMetrics: the gateway's /metrics on its own prometheus_client registry.

Counters are counted where the event happens (requests by code and model, routed by worker,
retries by reason), and so is the request-duration histogram (by code and model: what a client
waited, its wait for a worker and any retry included); gauges are read from their owners (each
fleet's waiting room, by `fleet`, and worker registry) at scrape time.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from gateway.config import DEFAULT_FLEET
from gateway.waiting import WaitingRoom
from gateway.workers import WorkerRegistry, WorkerState

PREFIX = "scoringfleet_gateway"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# The server's sglang:e2e_request_latency_seconds buckets, with the gateway's own finer low end
# (an answer it makes itself, a 401 or a full waiting room, takes well under 50 ms).
DURATION_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 60, 120, 300)
# cache_aware's estimate error as observed / predicted seconds to an answer: a ratio, so one set of
# buckets fits requests of every size; 1 is exact, 0.5 twice too slow a guess, 2 twice too fast.
FINISH_RATIO_BUCKETS = (0.25, 0.5, 0.67, 0.8, 0.9, 1.1, 1.25, 1.5, 2, 4, 8)


class _LiveGauges:
    """Gauges computed from the owners' state when scraped, never remembered: each fleet's
    waiting room and worker registry."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.fleets: dict[str, tuple[WaitingRoom, WorkerRegistry]] = {}

    def collect(self):
        waiting = GaugeMetricFamily(f"{PREFIX}_waiting_requests", "Requests waiting for a ready worker "
                                    "of their fleet (the demand that wakes a fleet from zero)", labels=["fleet"])
        for name, (room, _) in self.fleets.items():
            waiting.add_metric([name], room.num_waiting)
        yield waiting
        yield from self._workers([registry for _, registry in self.fleets.values()])

    def _workers(self, registries: list[WorkerRegistry]):
        load = GaugeMetricFamily(f"{PREFIX}_worker_load",
                                 "num_reqs last reported by a worker plus sequences sent since",
                                 labels=["worker"])
        for url, value in ((u, v) for registry in registries for u, v in registry.loads().items()):
            load.add_metric([url], value)
        yield load
        tokens = GaugeMetricFamily(f"{PREFIX}_worker_tokens_in_flight",
                                   "Tokens of this gateway's requests sent to a worker and not yet answered "
                                   "(cache_aware's queue estimate)", labels=["worker"])
        rate = GaugeMetricFamily(f"{PREFIX}_worker_rate_tokens_per_second",
                                 "A worker's tokens per second, learned from this gateway's answers "
                                 "(absent before its first)", labels=["worker"])
        for worker in (worker for registry in registries for worker in registry.all()):
            tokens.add_metric([worker.url], worker.tokens_in_flight)
            if worker.rate is not None:
                rate.add_metric([worker.url], worker.rate)
        yield tokens
        yield rate
        states = GaugeMetricFamily(f"{PREFIX}_workers", f"Workers by state ({', '.join(s.value for s in WorkerState)})",
                                   labels=["state"])
        now = self.clock()
        counts = [registry.counts_by_state(now) for registry in registries]
        for state in WorkerState:  # summed over the fleets (each worker URL is in one)
            states.add_metric([state.value], sum(count[state.value] for count in counts))
        yield states


class GatewayMetrics:
    """The gateway's metrics; `waiting` and `workers` given: the gauges of one fleet named
    `fleet` (add_fleet() adds each other)."""

    def __init__(self, waiting: WaitingRoom | None = None, workers: WorkerRegistry | None = None,
                 clock: Callable[[], float] = time.monotonic, fleet: str = DEFAULT_FLEET) -> None:
        self.registry = CollectorRegistry()
        # `model`: the served name a request resolved to ("" before it resolved: refused at the door)
        self.requests = Counter(f"{PREFIX}_requests", "Score requests answered, by HTTP status and model",
                                    ["code", "model"], registry=self.registry)
        self.routed = Counter(f"{PREFIX}_routed", "Upstream attempts, by worker", ["worker"],
                              registry=self.registry)
        self.request_duration = Histogram(
            f"{PREFIX}_request_duration_seconds",
            "Client requests' time from arrival to answer, by HTTP status and model", ["code", "model"],
            registry=self.registry, buckets=DURATION_BUCKETS_S)
        self.retries = Counter(f"{PREFIX}_retries", "Retries on another worker, by reason",
                               ["reason"], registry=self.registry)
        self.affinity = Counter(
            f"{PREFIX}_affinity", "cache_aware choices: hit (a worker holding the query), new (a query "
            "no worker holds: the earliest finish), spill (another worker holds it, but this one "
            "finishes it sooner), unkeyed (no query key: the earliest finish)",
            ["outcome"], registry=self.registry)
        self.finish_estimate = Histogram(
            f"{PREFIX}_finish_estimate_ratio", "cache_aware: a request's observed seconds from sent to "
            "answered over the predicted (1: exact; answered 200s only)",
            registry=self.registry, buckets=FINISH_RATIO_BUCKETS)
        self._gauges = _LiveGauges(clock)
        self.registry.register(self._gauges)
        if waiting is not None and workers is not None:
            self.add_fleet(fleet, waiting, workers)

    def add_fleet(self, name: str, waiting: WaitingRoom, workers: WorkerRegistry) -> None:
        """A fleet's waiting room and workers, read at each scrape."""
        self._gauges.fleets[name] = (waiting, workers)

    def observe_answer(self, status: int, duration_s: float, model: str = "") -> None:
        """One client request for `model` (a served name, or "") answered with `status` after
        `duration_s` seconds."""
        code = str(status)
        self.requests.labels(code=code, model=model).inc()
        self.request_duration.labels(code=code, model=model).observe(duration_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
