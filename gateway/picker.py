"""Pure choice of a worker: power of two random choices on the corrected load, or round robin.

No I/O and no clock: the caller passes the fresh workers, a random source and a counter.
"""
from __future__ import annotations

import random
from collections.abc import Sequence

from gateway.workers import Worker


def pick(workers: Sequence[Worker], policy: str, rng: random.Random, turn: int) -> Worker | None:
    """The worker for the next request, or None when `workers` is empty.

    power_of_two: two distinct random workers, the lower corrected load wins, ties at random.
    round_robin: workers sorted by URL, the `turn`-th (mod their number).
    """
    if not workers:
        return None
    if policy == "round_robin":
        ordered = sorted(workers, key=lambda w: w.url)
        return ordered[turn % len(ordered)]
    if len(workers) == 1:
        return workers[0]
    first, second = rng.sample(list(workers), 2)
    if first.load == second.load:
        return rng.choice((first, second))
    return first if first.load < second.load else second
