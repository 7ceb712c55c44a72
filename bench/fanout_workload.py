"""The fan-out workloads and what a run of one amounts to: pure functions, no I/O, no clock.

Fan-out: a ranking service scores one user's long query against many short candidates, split into
concurrent requests (issue 41's: a 2,000-token query, 6 requests of 16 items of 50 tokens, six
queries in turn). Distinct: the same token counts with every request's query its own. Mixed: half
of each, interleaved. Sizes: the fan-out with each request's item count drawn from 1 to a maximum
(a client that splits its candidates unevenly). Bodies are token ids drawn from a seeded
random.Random (bench.workload): a new seed is a set of queries no server has seen.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, replace

from bench.workload import ScoreBody, Workload, make_bodies


@dataclass(frozen=True)
class FanOut:
    num_queries: int = 6
    requests_per_query: int = 6
    num_items: int = 16
    query_tokens: int = 2000
    item_tokens: int = 50
    label_ids: tuple[int, ...] = (9230, 2838)

    def __post_init__(self) -> None:
        for name in ("num_queries", "requests_per_query"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def workload(self) -> Workload:
        return Workload(num_items=self.num_items, query_tokens=self.query_tokens,
                        item_tokens=self.item_tokens, label_ids=self.label_ids)

    @property
    def num_requests(self) -> int:
        return self.num_queries * self.requests_per_query


def fanout_bodies(shape: FanOut, seed: int) -> list[ScoreBody]:
    """Query by query: each query's requests_per_query requests in a row, each with its own items."""
    queries = make_bodies(shape.workload, shape.num_queries, seed)
    requests = make_bodies(shape.workload, shape.num_requests, seed + 1)
    return [ScoreBody(queries[i // shape.requests_per_query].query, body.items, body.label_token_ids)
            for i, body in enumerate(requests)]


def distinct_bodies(shape: FanOut, seed: int) -> list[ScoreBody]:
    """As many requests of the same sizes, every one with a query of its own."""
    return make_bodies(shape.workload, shape.num_requests, seed)


def mixed_bodies(shape: FanOut, seed: int) -> list[ScoreBody]:
    """Half fan-out (half the queries, each with all its requests), half distinct, alternating."""
    fanned = fanout_bodies(replace(shape, num_queries=max(shape.num_queries // 2, 1)), seed)
    distinct = make_bodies(shape.workload, len(fanned), seed + 2)
    return [body for pair in zip(fanned, distinct) for body in pair]


def sized_bodies(shape: FanOut, seed: int, max_items: int = 64) -> list[ScoreBody]:
    """The fan-out (its queries, in order) with each request's item count uniform in 1..max_items."""
    rng = random.Random(seed + 3)
    many = make_bodies(replace(shape.workload, num_items=max_items), shape.num_requests, seed + 1)
    return [ScoreBody(body.query, extra.items[:rng.randint(1, max_items)], body.label_token_ids)
            for body, extra in zip(fanout_bodies(shape, seed), many)]


def query_tokens(bodies: list[ScoreBody]) -> int:
    """Query tokens as sent: each request's query counted once (a server computes it at most once
    per request)."""
    return sum(len(body.query) for body in bodies)


def repeated_query_tokens(bodies: list[ScoreBody]) -> int:
    """Query tokens of the requests whose query an earlier request of the run already carried:
    what a perfect cross-request cache would serve."""
    seen: set[tuple[int, ...]] = set()
    repeated = 0
    for body in bodies:
        if body.query in seen:
            repeated += len(body.query)
        seen.add(body.query)
    return repeated


def item_tokens(bodies: list[ScoreBody]) -> int:
    return sum(len(item) for body in bodies for item in body.items)


def query_hit_share(bodies: list[ScoreBody], num_real_computed: float) -> float | None:
    """Share of the repeated query tokens that no server computed, from the servers' own count of
    real (non-padding) tokens computed: every item token is computed once, so the rest of the
    computed tokens are queries. None when nothing was counted or nothing repeated."""
    repeated = repeated_query_tokens(bodies)
    if num_real_computed <= 0 or repeated == 0:
        return None
    num_query_computed = num_real_computed - item_tokens(bodies)
    return (query_tokens(bodies) - num_query_computed) / repeated


def shares(counts: dict[str, float]) -> dict[str, float]:
    """Each key's share of the total (0 for all when the total is 0)."""
    total = sum(counts.values())
    return {key: (value / total if total else 0.0) for key, value in counts.items()}
