"""Prometheus metrics with SGLang's names, in a registry of their own (no process-global state).

Gauges are read from the scheduler when Prometheus scrapes, so they are true at that moment, not
only when a batch forms. Counters and histograms are owned here and fed by the engine.
"""
from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from server.scheduler import Load

LABEL_NAMES = ("model_name", "engine_type", "tp_rank", "pp_rank")
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 60, 120, 300)


class ServerMetrics:
    def __init__(self, model_name: str, max_total_tokens: int, load: Callable[[], Load],
                 model_loading: bool = False) -> None:
        """`model_loading`: these are a starting server's metrics (startup.py), its model not yet
        loaded; an engine's are never loading."""
        self.labels = {"model_name": model_name, "engine_type": "unified", "tp_rank": "0",
                       "pp_rank": "0"}
        self.max_total_tokens = max_total_tokens
        self.load = load
        self.model_loading = model_loading
        self.num_prompt_tokens = 0
        self.num_cached_tokens = 0
        self.num_requests = 0
        self.num_items = 0  # sequences of finished requests: one per item scored
        self.num_aborted_requests = 0
        self.num_computed_tokens = 0  # token positions the forwards computed, padding included
        self.num_padding_tokens = 0
        self.registry = CollectorRegistry()
        self.registry.register(_ScrapeTimeCollector(self))
        # process_start_time_seconds: a restarted process is a new pod to whoever scrapes it.
        ProcessCollector(registry=self.registry)
        self.e2e_latency = Histogram(
            "sglang:e2e_request_latency_seconds", "End-to-end latency of finished requests.",
            LABEL_NAMES, registry=self.registry, buckets=LATENCY_BUCKETS_S).labels(**self.labels)
        self.queue_time = Histogram(
            "sglang:queue_time_seconds", "Time from arrival to a request's first forward batch.",
            LABEL_NAMES, registry=self.registry, buckets=LATENCY_BUCKETS_S).labels(**self.labels)

    def observe_finished(self, num_items: int, num_prompt_tokens: int, e2e_s: float,
                         queue_s: float) -> None:
        self.num_requests += 1
        self.num_items += num_items
        self.num_prompt_tokens += num_prompt_tokens
        self.e2e_latency.observe(e2e_s)
        self.queue_time.observe(queue_s)

    def observe_cached_tokens(self, num_tokens: int) -> None:
        self.num_cached_tokens += num_tokens

    def observe_computed_tokens(self, num_computed: int, num_padding: int) -> None:
        self.num_computed_tokens += num_computed
        self.num_padding_tokens += num_padding

    def observe_aborted(self) -> None:
        self.num_aborted_requests += 1

    @property
    def cache_hit_rate(self) -> float:
        """Share of finished prompt tokens whose query key/values were reused, not computed."""
        return self.num_cached_tokens / self.num_prompt_tokens if self.num_prompt_tokens else 0.0

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _ScrapeTimeCollector:
    def __init__(self, metrics: ServerMetrics) -> None:
        self.metrics = metrics

    def collect(self):
        m = self.metrics
        load = m.load()
        values = list(m.labels.values())

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            family = GaugeMetricFamily(f"sglang:{name}", doc, labels=LABEL_NAMES)
            family.add_metric(values, value)
            return family

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(f"sglang:{name}", doc, labels=LABEL_NAMES)
            family.add_metric(values, value)
            return family

        # Not SGLang's: 1 from the process's first second until its model is loaded (its load is
        # then truly 0 and it takes no request), 0 after. Autoscalers count such a pod as 0.
        loading = GaugeMetricFamily("scoringfleet_model_loading",
                                    "1 while the server is loading its model, else 0.",
                                    labels=("model_name",))
        loading.add_metric([m.labels["model_name"]], float(m.model_loading))
        yield loading
        yield gauge("num_running_reqs", "Sequences in forward batches not yet delivered.",
                    load.num_running)
        yield gauge("num_queue_reqs", "Sequences waiting for a forward batch.", load.num_waiting)
        yield gauge("num_used_tokens", "Tokens held by running sequences.", load.num_running_tokens)
        yield gauge("token_usage", "num_used_tokens / max_total_num_tokens.",
                    load.num_running_tokens / m.max_total_tokens)
        yield gauge("max_total_num_tokens", "The running-token budget.", m.max_total_tokens)
        yield gauge("cache_hit_rate", "Share of prompt tokens served from the query cache.",
                    m.cache_hit_rate)
        yield counter("prompt_tokens", "Prompt tokens of finished requests.", m.num_prompt_tokens)
        yield counter("num_requests", "Finished requests.", m.num_requests)
        # Not SGLang's (a request there is one sequence): the items scored, for items/s.
        yield counter("scored_items", "Items scored (sequences of finished requests).",
                      m.num_items)
        yield counter("num_aborted_requests", "Requests that timed out, disconnected or failed.",
                      m.num_aborted_requests)
        yield counter("cached_tokens", "Prompt tokens served from the query cache.",
                      m.num_cached_tokens)
        # Not SGLang's: what the forwards computed, so benchmarks measure padding, not estimate it.
        yield counter("computed_tokens", "Token positions computed by forwards, padding included.",
                      m.num_computed_tokens)
        yield counter("padding_tokens", "Computed token positions that were padding.",
                      m.num_padding_tokens)
