"""WorkerRegistry: the workers in rotation, each with its last /get_load answer, the sequences
the gateway has sent it since that answer (the in-flight correction) and the requests it has sent
it and not yet had answered.

The only owner of per-worker state. Pure bookkeeping: every time is passed in (monotonic seconds).
The poller reports its polls to it (poll_started, record_answer, record_failure); the router the
requests it sends, their ends and the connections that fail (record_sent, record_done,
record_failure; the proxy only answers the router). The picker and affinity.choose get the
registry's live Worker objects (fresh()), not copies, and only read them. Discovery
(app.set_rotation) sets who is in (set_urls). After each change of a worker's record it calls
`on_change(url, record or None)` (the transition log decides whether that was a transition worth
a line); when an answer shows a worker may be a new process, `on_new_process(url)` (the router
forgets its queries). `worker_state()` is the one classification of a worker.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from gateway.finish import decayed, rate_of


class WorkerState(StrEnum):
    """A worker's one state: the transition log's word, the workers gauge's label, /ready's reason."""

    JOINED = "joined"              # in rotation, no /get_load answer yet (or the key not yet checked)
    READY = "ready"                # choosable: answered lately, nothing failed since, the key taken
    DRAINING = "draining"          # answered a draining 503: still choosable while fresh
    STALE = "stale"                # a poll or a connection failed, or no answer lately
    UNAUTHORIZED = "unauthorized"  # rejects the gateway's API key
    LOADING = "loading"            # answers, but its model is still loading (a new or restarted server)
    GONE = "gone"                  # left the rotation


@dataclass
class Worker:
    url: str
    num_reqs: int = 0           # running + waiting sequences, as last answered
    answered_at: float | None = None  # when that answer came (None: never)
    failed: bool = False         # the last poll or connection to it failed
    failure: str = ""            # why it failed, while `failed`
    draining: bool = False       # answered a draining 503 (since then no poll or connection failed)
    num_sent: int = 0            # sequences sent to it, ever
    num_sent_at_poll: int = 0    # num_sent when the poll behind `num_reqs` was sent
    key_accepted: bool | None = None  # whether it takes the gateway's API key (None: unknown)
    loading: bool = False        # its last answer said its model is still loading (no work)
    requests_in_flight: int = 0  # requests this gateway sent it and has not had answered (or failed)
    tokens_in_flight: float = 0.0  # their tokens as the worker computes them (finish.Size.cost)
    busy_since: float = 0.0      # since when it has had requests of ours in flight, or last answered one
    answered_tokens: float = 0.0  # decayed sums (finish.decayed) of the tokens of its answers ...
    busy_s: float = 0.0          # ... and of the seconds it was busy with ours until each
    models: frozenset[str] | None = None  # the ids its GET /v1/models listed (None: not yet asked)

    @property
    def rate(self) -> float | None:
        """Tokens per second while busy with this gateway's requests; None before an answer."""
        return rate_of(self.answered_tokens, self.busy_s)

    @property
    def num_in_flight(self) -> int:
        """Sequences sent since the last answered poll went out: the answer cannot include them."""
        return self.num_sent - self.num_sent_at_poll

    @property
    def load(self) -> int:
        """The corrected load the picker compares: reported num_reqs + sequences sent since."""
        return self.num_reqs + self.num_in_flight

    def is_fresh(self, now: float, stale_after_s: float, key_required: bool = False) -> bool:
        """Choosable: answered /get_load lately, nothing failed since, and (when the gateway has
        a key) known to accept the key."""
        return worker_state(self, now, stale_after_s, key_required) in (WorkerState.READY, WorkerState.DRAINING)


def worker_state(worker: Worker | None, now: float, stale_after_s: float,
                 key_required: bool = False) -> WorkerState:
    """The one classification of a worker (None: out of the rotation); pure. A refused key wins
    over a failure: it needs someone to act, a failure may pass."""
    if worker is None:
        return WorkerState.GONE
    if worker.key_accepted is False:
        return WorkerState.UNAUTHORIZED
    if worker.failed:
        return WorkerState.STALE
    if worker.answered_at is None or (key_required and worker.key_accepted is None):
        return WorkerState.JOINED
    if now - worker.answered_at > stale_after_s:
        return WorkerState.STALE
    if worker.loading:
        return WorkerState.LOADING
    return WorkerState.DRAINING if worker.draining else WorkerState.READY


def is_new_process(worker: Worker, loading: bool) -> bool:
    """An answer from a worker that answered before may come from a new process (its caches empty):
    it loads again, or it answers after a failure (a server without the loading header, SGLang's, or
    one that loaded between two polls, shows a restart only so). A failure that was not a restart
    costs the worker's queries one recompute each; a restart taken for none would count hits on an
    empty cache."""
    return worker.answered_at is not None and ((loading and not worker.loading) or worker.failed)


class WorkerRegistry:
    """Workers by URL. `gone` counts URLs that left the rotation and have not come back, since
    start (cumulative: it grows with pod churn, one entry per pod IP seen leaving)."""

    def __init__(self, stale_after_s: float, key_required: bool = False,
                 on_change: Callable[[str, Worker | None], None] | None = None,
                 on_new_process: Callable[[str], None] | None = None) -> None:
        self.stale_after_s = stale_after_s
        self.key_required = key_required  # the gateway has an API key: workers must accept it
        self.on_change = on_change
        self.on_new_process = on_new_process
        self._workers: dict[str, Worker] = {}
        self._gone: set[str] = set()

    def set_urls(self, urls) -> tuple[list[str], list[str]]:
        """Make the rotation exactly `urls`; returns (added, removed). Kept workers keep their state."""
        wanted = set(urls)
        added = sorted(wanted - self._workers.keys())
        removed = sorted(self._workers.keys() - wanted)
        for url in removed:
            del self._workers[url]
        for url in added:
            self._workers[url] = Worker(url)
        self._gone = (self._gone | set(removed)) - wanted
        for url in added + removed:
            self._changed(url)
        return added, removed

    def _changed(self, url: str) -> None:
        if self.on_change is not None:
            self.on_change(url, self._workers.get(url))

    def get(self, url: str) -> Worker | None:
        return self._workers.get(url)

    def urls(self) -> list[str]:
        return list(self._workers)

    def poll_started(self, url: str) -> int:
        """Call as a poll goes out; pass the returned mark to record_answer."""
        worker = self._workers.get(url)
        return worker.num_sent if worker else 0

    def record_answer(self, url: str, num_reqs: int, mark: int, now: float,
                      loading: bool = False) -> None:
        """A poll answered: `num_reqs`, and whether the worker's model is still `loading`."""
        worker = self._workers.get(url)
        if worker is None:
            return
        if is_new_process(worker, loading):
            worker.models = None  # a new process may serve other adapters: asked again
            if self.on_new_process is not None:
                self.on_new_process(url)
        if self.state(url, now) is WorkerState.STALE:
            # Stale until this answer; by time only (a late poll) no record change said so: tell
            # it now, or the log never shows why the router passed the worker over meanwhile.
            self._changed(url)
        worker.num_reqs, worker.answered_at, worker.failed = num_reqs, now, False
        if loading and not worker.loading:  # a new process (a restart): its key is checked anew,
            worker.key_accepted, worker.draining = None, False  # and the old one's drain is over
        worker.loading = loading
        worker.num_sent_at_poll = mark
        self._changed(url)

    def record_models(self, url: str, ids) -> None:
        """The ids the worker's GET /v1/models listed (its adapters among them)."""
        worker = self._workers.get(url)
        if worker is not None:
            worker.models = frozenset(ids)

    def record_failure(self, url: str, reason: str = "") -> None:
        """A poll or a connection failed (`reason`: why, for the log): not chosen again until a
        poll answers. A draining worker that fails has exited: no longer draining."""
        worker = self._workers.get(url)
        if worker is not None:
            worker.failed, worker.failure, worker.draining = True, reason, False
            self._changed(url)

    def record_draining(self, url: str) -> None:
        """The worker answered a draining 503 (it is shutting down; still chosen while fresh:
        its 503 costs no retry)."""
        worker = self._workers.get(url)
        if worker is not None:
            worker.draining = True
            self._changed(url)

    def record_key(self, url: str, accepted: bool) -> bool:
        """Whether the worker took the gateway's API key; True when that changed (and only then
        is on_change told)."""
        worker = self._workers.get(url)
        if worker is None or worker.key_accepted is accepted:
            return False
        worker.key_accepted = accepted
        self._changed(url)
        return True

    def record_sent(self, url: str, num_sequences: int, tokens: float = 0.0, now: float = 0.0) -> None:
        """A request of `num_sequences` (`tokens` to compute) goes out to `url` at `now`: in
        flight until record_done."""
        worker = self._workers.get(url)
        if worker is not None:
            if worker.requests_in_flight == 0:  # idle until now: its busy time starts
                worker.busy_since = now
            worker.num_sent += num_sequences
            worker.requests_in_flight += 1
            worker.tokens_in_flight += tokens

    def record_done(self, url: str, tokens: float = 0.0, answered_at: float | None = None) -> None:
        """A request sent to `url` (of `tokens`) ended: answered at `answered_at` (its tokens
        and the busy time since the last answer teach the worker's rate), or failed or timed out
        (None: no lesson). A worker that left and came back meanwhile is a new record: its counts
        never go below 0."""
        worker = self._workers.get(url)
        if worker is None or worker.requests_in_flight <= 0:
            return
        worker.requests_in_flight -= 1
        worker.tokens_in_flight = max(worker.tokens_in_flight - tokens, 0.0)
        if answered_at is not None:
            # NOTE: busy time, not the request's latency: concurrent requests share the worker,
            # and one that waited behind others did not take it all that time.
            worker.answered_tokens = decayed(worker.answered_tokens, tokens)
            worker.busy_s = decayed(worker.busy_s, max(answered_at - worker.busy_since, 0.0))
            worker.busy_since = answered_at

    def fresh(self, now: float) -> list[Worker]:
        return [w for w in self._workers.values()
                if w.is_fresh(now, self.stale_after_s, self.key_required)]

    def state(self, url: str, now: float) -> WorkerState:
        return worker_state(self._workers.get(url), now, self.stale_after_s, self.key_required)

    def counts_by_state(self, now: float) -> dict[str, int]:
        """Every state's value with its count (0 included); `gone` counts URLs that left the rotation."""
        counts = Counter(self.state(url, now) for url in self._workers)
        counts[WorkerState.GONE] = len(self._gone)
        return {state.value: counts[state] for state in WorkerState}

    def all(self) -> list[Worker]:
        """The workers in rotation, live records (read only: the metrics' gauges)."""
        return list(self._workers.values())

    def loads(self) -> dict[str, int]:
        return {url: w.load for url, w in self._workers.items()}
