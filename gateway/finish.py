"""Expected finish (`--policy cache_aware`): the pure estimate of when a request would be answered
on each worker, and the choice of the earliest; plus the rule that learns a worker's rate.

A worker's finish for a request = (the tokens this gateway has in flight there + the request's own
tokens: its items, and its query only where the worker does not hold it) / the worker's measured
tokens per second (a worker not yet measured: the median of those that are). So a hot query
leaves its holder once queueing behind it costs more than computing the query again elsewhere.
A worker that would compute again a query another worker holds is also charged `recompute_charge`
times that query's time (docs/gateway.md: the copy is work the fleet does instead of other
requests, which a request's own finish does not see; with 0 a burst of one query spreads over
every worker). No I/O, no clock, no Worker objects: numbers in, a choice out.
"""
from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Until some worker has answered, every worker is assumed this fast (tokens/s): all alike, so the
# choice is by tokens alone; the value only scales the first predictions.
DEFAULT_RATE_TOKENS_PER_S = 1000.0
# Each answer's weight against the past in a worker's rate: ~10 answers, so the requests of one
# batch (answered together: one with the batch's time, the rest with ~0 s) average out.
RATE_DECAY = 0.9
DEFAULT_RECOMPUTE_CHARGE = 3.0


@dataclass(frozen=True)
class Size:
    """A request's tokens as a worker computes them: the query once, then every item."""

    query_tokens: float
    item_tokens: float

    def cost(self, holds_query: bool) -> float:
        return self.item_tokens + (0.0 if holds_query else self.query_tokens)


@dataclass(frozen=True)
class Option:
    """One fresh worker as the estimate sees it."""

    url: str
    tokens_in_flight: float     # this gateway's requests there, not yet answered, in tokens
    rate: float | None          # measured tokens/s; None: not yet measured
    holds_query: bool = False   # it holds (or is computing) the request's query
    order: int = 0              # tie order: the higher, the sooner (the query's rendezvous rank)


@dataclass(frozen=True)
class Estimate:
    url: str
    finish_s: float     # predicted seconds from now until the answer
    cost_tokens: float  # the request's tokens on that worker (what goes in flight there)
    outcome: str        # hit (it holds the query), new (no worker holds it), spill (another does)


def median_rate(rates: Iterable[float | None]) -> float:
    """The fleet's median measured rate: what a worker not yet measured is assumed to do."""
    known = [rate for rate in rates if rate is not None and rate > 0]
    return statistics.median(known) if known else DEFAULT_RATE_TOKENS_PER_S


def earliest(options: Sequence[Option], size: Size, recompute_charge: float = DEFAULT_RECOMPUTE_CHARGE,
             keyed: bool = True) -> Estimate | None:
    """The option where `size` would finish first, with the recompute charge on a worker that
    would compute a query another option holds; ties: a holder, then the highest order. None
    without options. `keyed` False: the request has no shared query (nothing to hold)."""
    if not options:
        return None
    prior = median_rate(option.rate for option in options)
    anyone_holds = keyed and any(option.holds_query for option in options)

    def score(option: Option) -> tuple[float, bool, int]:
        rate = option.rate or prior
        holds = keyed and option.holds_query
        finish = (option.tokens_in_flight + size.cost(holds)) / rate
        charge = recompute_charge * size.query_tokens / rate if anyone_holds and not holds else 0.0
        return finish + charge, not holds, -option.order

    best = min(options, key=score)
    holds = keyed and best.holds_query
    cost = size.cost(holds)
    outcome = "hit" if holds else "spill" if anyone_holds else "new" if keyed else "unkeyed"
    return Estimate(best.url, (best.tokens_in_flight + cost) / (best.rate or prior), cost, outcome)


def decayed(total: float, sample: float) -> float:
    """One step of a decayed sum: the past weighs RATE_DECAY per answer."""
    return RATE_DECAY * total + sample


def rate_of(tokens: float, busy_s: float) -> float | None:
    """Tokens/s from the decayed sums of tokens answered and of seconds busy; None before any."""
    return tokens / busy_s if tokens > 0 and busy_s > 0 else None
