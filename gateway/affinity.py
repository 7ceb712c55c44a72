"""Cache-aware routing (`--policy cache_aware`): the query a request carries, which workers hold
or are computing each query, and the pure choice of a worker from those.

A query's key is a digest of the query as sent (text or token ids, as the client wrote it): the
same query always gets the same key, a text and its token ids get two. `item_first` requests
have no key: the item comes first, so no two of them share a head a worker could keep.
QueryHolders owns the query -> workers map (an LRU bounded by its number of queries); the Router
records each choice in it; a worker that leaves (discovery) or may have restarted (the registry) is
dropped from it. Keyed choices weigh each worker by the requests this gateway has in flight to it
(`Worker.requests_in_flight`, SGLang's router's load: counted when sent, so a fan-out that arrives
in one burst sees itself pile up; no poll lag). No I/O and no clock here.
"""
from __future__ import annotations

import hashlib
import json
import random
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gateway.config import DEFAULT_BALANCE_ABS, DEFAULT_BALANCE_REL, DEFAULT_MAX_QUERIES
from gateway.picker import pick
from gateway.workers import Worker

OUTCOMES = ("hit", "new", "spill", "unkeyed")


def query_key(payload) -> str | None:
    """A digest of the request's query, or None: an item_first request, or a body that is not a
    score request (the worker answers it 400; any worker will do)."""
    if not isinstance(payload, dict) or payload.get("item_first") is True:
        return None
    query = payload.get("query")
    if not isinstance(query, (str, list)):
        return None
    # The kind is part of the key: the text "[1, 2]" and the ids [1, 2] are two queries.
    kind = "text" if isinstance(query, str) else "ids"
    canonical = json.dumps(query, separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(f"{kind}:{canonical}".encode(), digest_size=16).hexdigest()


@dataclass(frozen=True)
class Balance:
    """The balance thresholds, in requests in flight (SGLang's rule and unit: both must be passed)."""

    abs_threshold: int = DEFAULT_BALANCE_ABS
    rel_threshold: float = DEFAULT_BALANCE_REL

    def is_overloaded(self, load: int, min_load: int) -> bool:
        """`load` is busier than the lightest worker's `min_load` beyond both thresholds."""
        return load - min_load > self.abs_threshold and load > self.rel_threshold * min_load


@dataclass(frozen=True)
class Choice:
    worker: Worker | None
    outcome: str  # one of OUTCOMES; "" when there was no worker to choose


def rank(key: str, url: str) -> int:
    """The worker's place in the query's rendezvous order: the higher, the sooner it is chosen."""
    return int.from_bytes(hashlib.blake2b(f"{key}|{url}".encode(), digest_size=8).digest())


def fewest(key: str, workers: Sequence[Worker]) -> Worker:
    """The worker with the fewest requests in flight; ties in the query's rendezvous order, highest
    rank of (key, URL) first. On an even fleet that is the query's home: the same worker from
    every gateway replica, and a worker that joins or leaves moves only the queries it wins or
    held. `workers` must not be empty."""
    return min(workers, key=lambda w: (w.requests_in_flight, -rank(key, w.url), w.url))


def choose(key: str | None, holders: Iterable[str], workers: Sequence[Worker], balance: Balance,
           rng: random.Random) -> Choice:
    """The worker for a request with query `key` among the fresh `workers` (each with the
    requests this gateway has in flight to it).

    hit: the fresh worker among `holders` (those that hold or are computing it) with the fewest
    requests in flight;
    new: a query no fresh worker holds is computed once wherever it goes: to the worker with the
    fewest requests in flight, ties in its rendezvous order (an even fleet sends it home, whichever
    gateway replica routes it), so a few queries do not pile onto one worker while another idles;
    spill: a holder is overloaded (Balance) against the one with the fewest: the other worker with
    the fewest (ties: the query's rendezvous order), so a hot query spreads instead of pinning one
    worker, and its spills meet on as few workers as they can;
    unkeyed: no key (item_first): power of two on the polled load.
    """
    if not workers:
        return Choice(None, "")
    if key is None:
        return Choice(pick(workers, "power_of_two", rng, 0), "unkeyed")
    held = set(holders)
    holding = [w for w in workers if w.url in held]
    if holding:
        target, outcome = min(holding, key=lambda w: (w.requests_in_flight, w.url)), "hit"
    else:
        target, outcome = fewest(key, workers), "new"
    lightest = min(w.requests_in_flight for w in workers)
    if not balance.is_overloaded(target.requests_in_flight, lightest):
        return Choice(target, outcome)
    # Overloaded means some worker has fewer: `others` is never empty here.
    others = [w for w in workers if w is not target]
    return Choice(fewest(key, others), "spill")


class QueryHolders:
    """Query key -> URLs of the workers that hold or are computing it (in the order they got it),
    least recently routed query first out beyond max_queries."""

    def __init__(self, max_queries: int = DEFAULT_MAX_QUERIES) -> None:
        if max_queries < 1:
            raise ValueError(f"max_queries must be >= 1, got {max_queries}")
        self.max_queries = max_queries
        self._holders: OrderedDict[str, list[str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._holders)

    def get(self, key: str | None) -> tuple[str, ...]:
        return tuple(self._holders.get(key, ())) if key is not None else ()

    def add(self, key: str, url: str) -> None:
        """`url` was sent a request with query `key`: it holds it (or soon will)."""
        urls = self._holders.setdefault(key, [])
        if url not in urls:
            urls.append(url)
        self._holders.move_to_end(key)
        while len(self._holders) > self.max_queries:
            self._holders.popitem(last=False)

    def forget(self, urls: Iterable[str]) -> None:
        """Workers that left the rotation, or may have restarted, take their queries with them (a
        pod that comes back with the same address, a new process, has an empty cache). O(queries):
        only on a rotation change or a restart."""
        gone = set(urls)
        if not gone:
            return
        for key in list(self._holders):
            kept = [url for url in self._holders[key] if url not in gone]
            if kept:
                self._holders[key] = kept
            else:
                del self._holders[key]
