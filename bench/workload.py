"""The scoring workload and its statistics: pure functions, no I/O, no clock.

A request is a query of `query_tokens` random token ids plus `num_items` items of `item_tokens`
random ids each, and the label ids; all drawn from a seeded random.Random so that two runs (and
the offline and HTTP measurements of one run) score exactly the same requests. A mixed-length
workload draws each query's and item's length uniformly from a range instead (MIXED).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

# Ids below this are the special/control tokens of most vocabularies (SmolLM2: 0..16); random
# text never contains them, so neither does the workload.
MIN_TOKEN_ID = 100


@dataclass(frozen=True)
class Workload:
    num_items: int = 10
    query_tokens: int = 120
    item_tokens: int = 180
    label_ids: tuple[int, ...] = (9230, 2838)
    vocab_size: int = 49152  # SmolLM2's; token ids are drawn from [MIN_TOKEN_ID, vocab_size)
    # Inclusive (low, high): lengths drawn uniformly per query / per item instead of the fixed ones.
    query_tokens_range: tuple[int, int] | None = None
    item_tokens_range: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        for name in ("num_items", "query_tokens", "item_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("query_tokens_range", "item_tokens_range"):
            span = getattr(self, name)
            if span is not None and not 1 <= span[0] <= span[1]:
                raise ValueError(f"{name} must be (low, high) with 1 <= low <= high, got {span}")
        if not self.label_ids:
            raise ValueError("label_ids must not be empty")
        if self.vocab_size <= MIN_TOKEN_ID:
            raise ValueError(f"vocab_size must be > {MIN_TOKEN_ID}, got {self.vocab_size}")
        bad = [i for i in self.label_ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"label ids {bad} are outside the vocabulary [0, {self.vocab_size})")

    @property
    def tokens_per_request(self) -> int:
        """Tokens the naive loop computes per request (the query once per item)."""
        return self.num_items * (self.query_tokens + self.item_tokens)


@dataclass(frozen=True)
class ScoreBody:
    """One /v1/score request in token ids (SGLang's wire format: query, items, label_token_ids)."""

    query: tuple[int, ...]
    items: tuple[tuple[int, ...], ...]
    label_token_ids: tuple[int, ...]

    def to_json(self) -> dict:
        return {"query": list(self.query), "items": [list(item) for item in self.items],
                "label_token_ids": list(self.label_token_ids), "apply_softmax": False}


# Queries U[40, 200] and items U[20, 340] tokens: the same means as the default 120 / 180.
MIXED = Workload(query_tokens_range=(40, 200), item_tokens_range=(20, 340))


def make_bodies(workload: Workload, num_requests: int, seed: int) -> list[ScoreBody]:
    """`num_requests` distinct requests; the same seed gives the same requests."""
    rng = random.Random(seed)

    def ids(n: int, span: tuple[int, int] | None) -> tuple[int, ...]:
        n = rng.randint(*span) if span else n
        return tuple(rng.randrange(MIN_TOKEN_ID, workload.vocab_size) for _ in range(n))

    return [ScoreBody(ids(workload.query_tokens, workload.query_tokens_range),
                      tuple(ids(workload.item_tokens, workload.item_tokens_range)
                            for _ in range(workload.num_items)),
                      workload.label_ids)
            for _ in range(num_requests)]


def num_tokens(body: ScoreBody) -> int:
    """Tokens a request needs computed once its query is shared: the query once, every item."""
    return len(body.query) + sum(len(item) for item in body.items)


def poisson_send_times(rate_per_s: float, duration_s: float, seed: int) -> list[float]:
    """Send offsets (seconds from the start) of a Poisson process of `rate_per_s` over
    [0, duration_s): exponential gaps, first request at 0 (bench_score sends one at once too)."""
    if rate_per_s <= 0 or duration_s <= 0:
        raise ValueError(f"rate and duration must be > 0, got {rate_per_s}, {duration_s}")
    rng = random.Random(seed)
    times, now = [], 0.0
    while now < duration_s:
        times.append(now)
        now += rng.expovariate(rate_per_s)
    return times


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated q-th percentile (0..100), numpy's default; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: list[float]) -> float:
    return percentile(values, 50)
