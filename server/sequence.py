"""Sequence and Request: the units the scheduler moves and the engine answers.

A Request is one /v1/score call; each of its items is a Sequence. A Sequence holds its status and
its result, and only the scheduler writes them; a Request is finished when all of its sequences
are. Neither touches torch or asyncio beyond the future the engine resolves.
"""
from __future__ import annotations

import asyncio
import enum
import itertools
import time
from dataclasses import dataclass, field
from typing import Iterable

_request_ids = itertools.count(1)


class SequenceStatus(enum.Enum):
    WAITING = "waiting"    # admitted, not yet in a forward batch
    RUNNING = "running"    # in a forward batch whose results are not yet delivered
    FINISHED = "finished"  # scores delivered, or failed
    ABORTED = "aborted"    # left the queue before running (timeout, disconnect, failure, stop)


@dataclass(frozen=True)
class ScoringOptions:
    label_token_ids: tuple[int, ...]
    apply_softmax: bool


@dataclass(eq=False)
class Sequence:
    """One item: the request's shared prefix followed by this item's own token ids."""

    request: Request
    own_ids: tuple[int, ...]
    status: SequenceStatus = SequenceStatus.WAITING
    scores: list[float] | None = None

    @property
    def num_tokens(self) -> int:
        """Tokens this sequence attends over (and holds while running): prefix + own."""
        return len(self.request.prefix_ids) + len(self.own_ids)

    @property
    def is_done(self) -> bool:
        return self.status in (SequenceStatus.FINISHED, SequenceStatus.ABORTED)


@dataclass(eq=False)
class Request:
    """A /v1/score call after tokenization. prefix_ids is computed once and shared by all items."""

    prefix_ids: tuple[int, ...]
    options: ScoringOptions
    adapter: str | None = None  # the LoRA adapter its forwards go through; None: the base model
    rid: int = field(default_factory=lambda: next(_request_ids))
    arrival_s: float = field(default_factory=time.perf_counter)
    first_scheduled_s: float | None = None
    sequences: list[Sequence] = field(default_factory=list)
    future: asyncio.Future | None = None

    @classmethod
    def create(cls, prefix_ids: tuple[int, ...], own_ids: list[tuple[int, ...]],
               options: ScoringOptions, adapter: str | None = None) -> Request:
        request = cls(prefix_ids=prefix_ids, options=options, adapter=adapter)
        request.sequences = [Sequence(request, ids) for ids in own_ids]
        return request

    @property
    def num_prompt_tokens(self) -> int:
        return sum(seq.num_tokens for seq in self.sequences)

    @property
    def is_done(self) -> bool:
        return all(seq.is_done for seq in self.sequences)

    @property
    def scores(self) -> list[list[float]]:
        return [seq.scores for seq in self.sequences]


def requests_of(sequences: Iterable[Sequence]) -> list[Request]:
    """The distinct requests of these sequences, in the order they first appear."""
    return list({seq.request.rid: seq.request for seq in sequences}.values())


@dataclass(frozen=True)
class RunResult:
    """What a runner returns for one batch (the engine hands the scores to the scheduler)."""

    scores: list[list[float]]  # per sequence, in batch order: one probability per label id
    num_cached_tokens: int     # prefix tokens served from the query cache instead of computed
    # Token positions this run pushed through the model (new prefixes + every group's padded rows),
    # and how many of them were padding; prefix padding in the batch cache is attention-only and
    # not counted.
    num_computed_tokens: int = 0
    num_padding_tokens: int = 0
