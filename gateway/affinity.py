"""Cache-aware routing (`--policy cache_aware`): the query a request carries, which workers hold
or are computing each query, and the choice of a worker from those by expected finish.

A query's key is a digest of the query as sent (text or token ids, as the client wrote it): the
same query always gets the same key, a text and its token ids get two. `item_first` requests
have no key: the item comes first, so no two of them share a head a worker could keep.
QueryHolders owns the query -> workers map (an LRU bounded by its number of queries); the Router
records each choice in it; a worker that leaves (discovery) or may have restarted (the registry) is
dropped from it. choose() hands the workers' tokens in flight and measured rates, and who holds
the query, to the pure estimate (gateway.finish): counted when sent, so a fan-out that arrives in
one burst sees itself pile up with no poll lag. No I/O and no clock here.
"""
from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gateway.config import DEFAULT_MAX_QUERIES
from gateway.finish import DEFAULT_RECOMPUTE_CHARGE, Option, Size, earliest
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
class Choice:
    worker: Worker | None
    outcome: str  # one of OUTCOMES; "" when there was no worker to choose
    finish_s: float = 0.0     # the predicted seconds until its answer there
    cost_tokens: float = 0.0  # its tokens on that worker: the query unless it holds it, the items


def rank(key: str, url: str) -> int:
    """The worker's place in the query's rendezvous order: the higher, the sooner it is chosen
    among equal finishes (the same worker from every gateway replica on an even fleet)."""
    return int.from_bytes(hashlib.blake2b(f"{key}|{url}".encode(), digest_size=8).digest())


def choose(key: str | None, holders: Iterable[str], workers: Sequence[Worker], size: Size,
           recompute_charge: float = DEFAULT_RECOMPUTE_CHARGE) -> Choice:
    """The worker among the fresh `workers` where a request of `size` with query `key` would
    finish first (gateway.finish.earliest):

    hit: it holds or is computing the query (its items alone are computed);
    new: no fresh worker holds it: computed once wherever it goes, the earliest finish (ties in
    the query's rendezvous order, so an idle fleet sends it home, whichever gateway replica
    routes it);
    spill: another worker holds it, but queueing there costs more than computing the query again
    here (plus the recompute charge): a hot query spreads, a repeated one with a short queue
    stays home;
    unkeyed: no key (item_first, or no query): the earliest finish, nothing held.
    """
    held = set(holders)
    options = [Option(w.url, w.tokens_in_flight, w.rate, w.url in held, rank(key or "", w.url))
               for w in workers]
    estimate = earliest(options, size, recompute_charge, keyed=key is not None)
    if estimate is None:
        return Choice(None, "")
    worker = next(w for w in workers if w.url == estimate.url)
    return Choice(worker, estimate.outcome, estimate.finish_s, estimate.cost_tokens)


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
