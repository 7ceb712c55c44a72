"""Routing policies: one class per `--policy`, behind one interface (RoutingPolicy), made once at
start by make_policy() (SGLang's router: a policy trait and a factory).

A policy owns its own state (round_robin its turn, cache_aware its query -> workers map) and
chooses among the fresh workers the router hands it; it never sees the registry, the clock or
the network. One policy object per fleet: fleets never share a turn or a query map.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from gateway import affinity
from gateway.affinity import Choice
from gateway.config import GatewayConfig
from gateway.finish import Size
from gateway.workers import Worker


class RoutingPolicy(Protocol):
    """What the router asks of a policy."""

    name: str

    def choose(self, workers: Sequence[Worker], key: str | None, size: Size, is_retry: bool) -> Choice | None:
        """The worker among the fresh `workers` for a request whose query has `key` and of `size`
        (None when there is none); `is_retry`: a later attempt of a request already sent once."""

    def forget(self, urls: Iterable[str]) -> None:
        """Workers that left the rotation or may have restarted (a new process: nothing cached)."""


def power_of_two(workers: Sequence[Worker], rng: random.Random) -> Worker | None:
    """Two distinct random workers, the lower corrected load wins, ties at random."""
    if len(workers) <= 1:
        return workers[0] if workers else None
    first, second = rng.sample(list(workers), 2)
    if first.load == second.load:
        return rng.choice((first, second))
    return first if first.load < second.load else second


def round_robin(workers: Sequence[Worker], turn: int) -> Worker | None:
    """Workers sorted by URL, the `turn`-th (mod their number); loads do not matter."""
    if not workers:
        return None
    ordered = sorted(workers, key=lambda w: w.url)
    return ordered[turn % len(ordered)]


def _plain(worker: Worker | None, size: Size) -> Choice | None:
    # A load-blind choice still charges the request's tokens to the worker (its rate and queue).
    return Choice(worker, "", cost_tokens=size.cost(False)) if worker is not None else None


class PowerOfTwo:
    name = "power_of_two"

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def choose(self, workers: Sequence[Worker], key: str | None, size: Size, is_retry: bool) -> Choice | None:
        return _plain(power_of_two(workers, self.rng), size)

    def forget(self, urls: Iterable[str]) -> None:
        pass


class RoundRobin:
    name = "round_robin"

    def __init__(self) -> None:
        self.turn = 0

    def choose(self, workers: Sequence[Worker], key: str | None, size: Size, is_retry: bool) -> Choice | None:
        choice = _plain(round_robin(workers, self.turn), size)
        if choice is not None and not is_retry:  # a retry keeps the turn
            self.turn += 1
        return choice

    def forget(self, urls: Iterable[str]) -> None:
        pass


class CacheAware:
    """A query's requests go where it is held, unless another worker finishes sooner (affinity)."""

    name = "cache_aware"

    def __init__(self, max_queries: int, recompute_charge: float) -> None:
        self.holders = affinity.QueryHolders(max_queries)
        self.recompute_charge = recompute_charge

    def choose(self, workers: Sequence[Worker], key: str | None, size: Size, is_retry: bool) -> Choice | None:
        # A draining worker's load falls to 0: it would win as a holder and as the lightest.
        serving = [w for w in workers if not w.draining] or list(workers)
        choice = affinity.choose(key, self.holders.get(key), serving, size, self.recompute_charge)
        if choice.worker is None:
            return None
        if key is not None:  # it is computing the query from now on
            self.holders.add(key, choice.worker.url)
        return choice

    def forget(self, urls: Iterable[str]) -> None:
        self.holders.forget(urls)


POLICY_MAKERS: dict[str, Callable[[GatewayConfig, random.Random], RoutingPolicy]] = {
    "power_of_two": lambda config, rng: PowerOfTwo(rng),
    "round_robin": lambda config, rng: RoundRobin(),
    "cache_aware": lambda config, rng: CacheAware(config.max_tracked_queries, config.recompute_charge),
}


def make_policy(config: GatewayConfig, rng: random.Random | None = None) -> RoutingPolicy:
    """A new policy object for `config.policy` (checked by GatewayConfig: always one of these)."""
    return POLICY_MAKERS[config.policy](config, rng or random.Random())
