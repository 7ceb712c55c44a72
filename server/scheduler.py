"""Scheduler: the only owner of the waiting queue, the running set and every sequence's status.

Prefill-only: a sequence goes waiting -> running (in a forward batch) -> finished (finish/fail) or
aborted, and there is no decode step; the engine reports a batch's end here and never writes a
status itself. Everything the server reports about its load (gauges, /get_load) and every "is the batch full"
decision is computed from these two collections when asked, never remembered: SGLang once skipped
merging prefill-only batches into its running batch (gauges read 0 under load) and once deadlocked
on a latched "batch full" flag (#22518).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from server.sequence import Request, Sequence, SequenceStatus, requests_of


@dataclass(frozen=True)
class SchedulerLimits:
    max_running_requests: int   # sequences held by running batches
    max_prefill_tokens: int     # tokens in one forward batch
    max_total_tokens: int       # tokens held by running sequences
    max_queued_requests: int    # waiting sequences; beyond this, admission is refused
    # The runner's forwards hold a request's query once (the shared-prefix attention), so the
    # prefill budget may count it once per batch; else (a padded cache per row) every row whole.
    count_query_once: bool = False


@dataclass(frozen=True)
class Load:
    """A snapshot of the scheduler's state, in sequences and tokens."""

    num_running: int
    num_waiting: int
    num_running_tokens: int
    num_waiting_tokens: int

    @property
    def num_reqs(self) -> int:
        return self.num_running + self.num_waiting

    @property
    def num_tokens(self) -> int:
        return self.num_running_tokens + self.num_waiting_tokens


@dataclass(frozen=True)
class Batch:
    sequences: tuple[Sequence, ...]

    @property
    def requests(self) -> list[Request]:
        """The distinct requests in this batch, in batch order."""
        return requests_of(self.sequences)

    @property
    def num_tokens(self) -> int:
        return sum(seq.num_tokens for seq in self.sequences)


class QueueFull(Exception):
    """Admitting the request would exceed max_queued_requests."""


class Scheduler:
    def __init__(self, limits: SchedulerLimits) -> None:
        self.limits = limits
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, request: Request) -> None:
        """Admit all of a request's sequences, or none of them (QueueFull)."""
        num_new = len(request.sequences)
        if len(self.waiting) + num_new > self.limits.max_queued_requests:
            raise QueueFull(f"{len(self.waiting)} sequences waiting; admitting {num_new} more "
                            f"would exceed max_queued_requests={self.limits.max_queued_requests}")
        self.waiting.extend(request.sequences)

    def schedule(self) -> Batch | None:
        """Move the longest FIFO prefix of the waiting queue that fits the limits into a batch.

        FIFO without skipping: a large sequence at the head is never starved by small ones behind
        it. max_prefill_tokens shapes batches but refuses no sequence: one larger than it runs
        alone; it bounds what a batch's forwards hold: with count_query_once (the runner's
        shared-prefix attention) a request's query counts at most once per batch (prefill_cost),
        else every sequence whole; max_total_tokens counts every sequence whole, as the token
        usage does. Admission guarantees every sequence fits max_total_tokens on its own.
        """
        num_running = len(self.running)
        running_tokens = sum(seq.num_tokens for seq in self.running)
        batch: list[Sequence] = []
        batch_tokens = prefill_tokens = 0
        queries_in_batch: set[int] = set()
        while self.waiting:
            seq = self.waiting[0]
            prefill = prefill_cost(seq, queries_in_batch) if self.limits.count_query_once else seq.num_tokens
            if (num_running + len(batch) + 1 > self.limits.max_running_requests
                    or (batch and prefill_tokens + prefill > self.limits.max_prefill_tokens)
                    or running_tokens + batch_tokens + seq.num_tokens > self.limits.max_total_tokens):
                break
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            batch.append(seq)
            batch_tokens += seq.num_tokens
            prefill_tokens += prefill
            queries_in_batch.add(seq.request.rid)
        if not batch:
            return None
        self.running.extend(batch)
        return Batch(tuple(batch))

    def finish(self, batch: Batch, scores: list[list[float]]) -> list[Request]:
        """The batch's forward ended: its sequences leave running with their scores (in batch
        order). Returns the batch's requests that are now complete."""
        for seq, seq_scores in zip(batch.sequences, scores, strict=True):
            seq.status, seq.scores = SequenceStatus.FINISHED, seq_scores
        self._leave_running(batch)
        return [request for request in batch.requests if request.is_done]

    def fail(self, batch: Batch) -> list[Request]:
        """The batch's forward raised: its sequences leave running without scores, and its
        requests' waiting sequences leave the queue (a request fails whole). Returns them."""
        for seq in batch.sequences:
            seq.status = SequenceStatus.FINISHED
        self._leave_running(batch)
        requests = batch.requests
        for request in requests:
            self._mark_aborted(request)
        self._drop_aborted()  # one pass over the queue, however many requests failed
        return requests

    def abort(self, request: Request) -> None:
        """Remove a request's waiting sequences now; its running ones leave when their batch ends."""
        self._mark_aborted(request)
        self._drop_aborted()

    def abort_all(self) -> list[Request]:
        """Empty the queue and the running set (the server stops); returns the requests affected."""
        sequences = [*self.running, *self.waiting]
        for seq in sequences:
            seq.status = SequenceStatus.ABORTED
        self.running, self.waiting = [], deque()
        return requests_of(sequences)

    @staticmethod
    def _mark_aborted(request: Request) -> None:
        for seq in request.sequences:
            if seq.status is SequenceStatus.WAITING:
                seq.status = SequenceStatus.ABORTED

    def _drop_aborted(self) -> None:
        self.waiting = deque(seq for seq in self.waiting if seq.status is SequenceStatus.WAITING)

    def _leave_running(self, batch: Batch) -> None:
        ended = set(batch.sequences)
        self.running = [seq for seq in self.running if seq not in ended]

    def live_request_ids(self) -> set[int]:
        """Requests that still have a sequence waiting or running."""
        return {seq.request.rid for seq in (*self.waiting, *self.running)}

    def load(self) -> Load:
        """True at any moment: computed from the two collections, which finish() updates at once."""
        return Load(
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            num_running_tokens=sum(seq.num_tokens for seq in self.running),
            num_waiting_tokens=sum(seq.num_tokens for seq in self.waiting),
        )


def prefill_cost(seq: Sequence, queries_in_batch: set[int]) -> int:
    """Tokens `seq` adds to a batch's shared-prefix forwards: its own tokens, and its request's
    query (held once per batch, shared by the request's items) unless the batch already holds it;
    at most once, since a query already held or cached is not computed again."""
    shared = 0 if seq.request.rid in queries_in_batch else len(seq.request.prefix_ids)
    return len(seq.own_ids) + shared
