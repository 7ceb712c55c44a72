"""Who may write: kopf's peering (one active operator among replicas), and a gate on our own writes.

kopf's peering pauses the watchers and timers of every replica but the highest-priority live peer.
It is not a lock: a handler already running when its replica pauses goes on, and a leader whose
keep-alives stop landing (API errors) keeps working while the others already count it dead. So every
write of ours (kube.py's, through the ApiClient) also passes a Gate, open only while this replica is
the top live peer *as the peering object says* (read every poll_s by peering_watch.py), and only
until its own entry there expires (less a margin): a leader that cannot prove its lease stops
writing before anyone takes over. Handlers wrapped in leading_only() skip quietly while it is shut.

The pure part is here (config, judge, Gate); peering_watch.py reads the object and moves the Gate.
"""
from __future__ import annotations

import functools
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import kubernetes.client

from fleet_operator.clock import parse_time, utc_now
from scoringfleet_contract.facts import ENV_PREFIX

LIFETIME_ENV = ENV_PREFIX + "PEERING_LIFETIME_S"  # how long a silent peer counts (the chart sets it)
IDENTITY_ENV = "POD_ID"  # kopf's own: the peer's key in the peering object's status
DEFAULT_LIFETIME_S = 15  # kopf's default is 60: a crash would cost a minute without decisions
KOPF_DEFAULT_LIFETIME_S = 60  # what kopf assumes for a peer that states none
KOPF_DEV_PRIORITY = 666  # `kopf run --dev`
KOPF_NAMESPACE_ENV = "KOPF_RUN_NAMESPACE"  # kopf's legacy single namespace, added to --namespace
GROUP_VERSION = "kopf.dev/v1"
# Subtracted from a demoted leader's priority: below every replica that never lost its lease.
DEMOTION = 10 ** 16
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

log = logging.getLogger(__name__)


class NotLeading(Exception):
    """A write refused by the Gate: this replica is not (or can no longer prove it is) the leader."""


@dataclass(frozen=True)
class PeeringConfig:
    """The peering as `kopf run`'s arguments and the environment set it, fixed at start-up.

    enabled: `--peering NAME` was given (the chart always gives it); without it kopf runs standalone
    or auto-detects, and the Gate stays open. namespaces: () for cluster-wide (-A, a
    ClusterKopfPeering), else the watched namespaces, each with its own KopfPeering of that name.
    """

    enabled: bool = False
    name: str = "default"
    namespaces: tuple[str, ...] = ()
    identity: str = ""
    priority: int = 0
    lifetime_s: int = DEFAULT_LIFETIME_S

    def __post_init__(self) -> None:
        if self.lifetime_s < 2:
            raise ValueError(f"{LIFETIME_ENV} must be at least 2 seconds, got {self.lifetime_s}")

    @property
    def poll_s(self) -> float:
        """How often the peering object is read: well within the slack that kopf's keep-alive
        (every lifetime - 5..10 s) leaves before our own entry expires."""
        return max(0.5, self.lifetime_s / 10)

    @property
    def margin_s(self) -> float:
        """Our lease ends this long before the others count us dead (clock skew, a write in flight)."""
        return min(2.0, self.lifetime_s / 4)

    @classmethod
    def from_run_args(cls, params: Mapping[str, Any], environ: Mapping[str, str] = os.environ,
                      started_s: float | None = None) -> PeeringConfig:
        """From `kopf run`'s parsed options (peering_name, namespaces, standalone, priority, dev),
        read as kopf reads them: --dev is priority 666, KOPF_RUN_NAMESPACE one more namespace."""
        lifetime = environ.get(LIFETIME_ENV)
        priority = KOPF_DEV_PRIORITY if params.get("dev") else params.get("priority")
        legacy_namespace = environ.get(KOPF_NAMESPACE_ENV)
        return cls(enabled=bool(params.get("peering_name")) and not params.get("standalone"),
                   name=params.get("peering_name") or "default",
                   namespaces=(*(params.get("namespaces") or ()),
                               *((legacy_namespace,) if legacy_namespace else ())),
                   identity=environ.get(IDENTITY_ENV) or default_identity(),
                   priority=derived_priority(started_s) if priority is None else int(priority),
                   lifetime_s=int(lifetime) if lifetime else DEFAULT_LIFETIME_S)


def default_identity() -> str:
    """Outside a pod (no POD_ID): host and process, unique among the replicas of one machine."""
    return f"{socket.gethostname()}-{os.getpid()}"


def derived_priority(started_s: float | None = None) -> int:
    """Older replicas rank higher: -(start time in ms * 1000 + a random draw of 0..999).

    Distinct per replica (two replicas would need the same millisecond and the same draw; kopf
    pauses *both* of two equal peers), and a newcomer (a rollout's new pod, a restarted one) never
    preempts a working leader: leadership moves only when the leader leaves or dies.
    """
    started_ms = int((utc_now().timestamp() if started_s is None else started_s) * 1000)
    return -(started_ms * 1000 + random.randrange(1000))


@dataclass(frozen=True)
class Peer:
    identity: str
    priority: int
    deadline: datetime  # lastseen + lifetime: dead from then on (kopf's Peer.is_dead)


def parse_peers(status: Mapping[str, Any] | None, now: datetime) -> list[Peer]:
    """The peering object's status as kopf writes it: {identity: {priority, lifetime, lastseen}}."""
    peers = []
    for identity, info in (status or {}).items():
        if not isinstance(info, Mapping):
            continue
        try:
            lastseen = parse_time(info["lastseen"]) if info.get("lastseen") else now
            lifetime = timedelta(seconds=int(info.get("lifetime", KOPF_DEFAULT_LIFETIME_S)))
            peers.append(Peer(str(identity), int(info.get("priority", 0)), lastseen + lifetime))
        except (TypeError, ValueError):
            continue  # a hand-edited entry kopf could not read either
    return peers


@dataclass(frozen=True)
class Verdict:
    """One reading of the peering object(s)."""

    leading: bool
    leader: str | None  # the live peer with the highest priority (us or another), if any
    until: datetime | None  # leading: when our lease ends (our entry's deadline less the margin)
    # when the other live peers' leases end (the latest, less the margin): one that led until now may
    # be writing until then, unless it shut its gate (its next reading after leaving)
    rivals_until: datetime | None
    own_entry_live: bool  # our keep-alive is in the object and fresh
    own_entry_stale: bool  # it is there but ends within the margin: our keep-alives are not landing

    def describe(self) -> str:
        if self.leading:
            return f"leading until {self.until:%H:%M:%S}"
        if not self.own_entry_live:
            return "our keep-alive is missing or stale in the peering object"
        return f"standing by for {self.leader or 'a peer of equal priority'}"


def judge(statuses: Sequence[Mapping[str, Any] | None], identity: str, priority: int,
          now: datetime, margin_s: float) -> Verdict:
    """kopf's rule, over every peering object (one per watched namespace): we lead where our own
    entry is live and no other live peer has a priority >= ours (an equal one pauses both)."""
    one = [_judge_one(parse_peers(s, now), identity, priority, now, margin_s) for s in statuses]
    leading = bool(one) and all(v.leading for v in one)
    untils = [v.until for v in one if v.until is not None]
    rivals = [v.rivals_until for v in one if v.rivals_until is not None]
    return Verdict(leading=leading, leader=one[0].leader if one else None,
                   until=min(untils) if leading and untils else None,
                   rivals_until=max(rivals, default=None),
                   own_entry_live=bool(one) and all(v.own_entry_live for v in one),
                   own_entry_stale=any(v.own_entry_stale for v in one))


def _judge_one(peers: Iterable[Peer], identity: str, priority: int, now: datetime,
               margin_s: float) -> Verdict:
    peers = list(peers)
    live = [p for p in peers if p.deadline > now]
    own = next((p for p in peers if p.identity == identity), None)
    others = [p for p in live if p.identity != identity]
    top = max(live, key=lambda p: p.priority, default=None)
    margin = timedelta(seconds=margin_s)
    own_live = own is not None and own.deadline - margin > now
    leading = own_live and all(p.priority < priority for p in others)
    return Verdict(leading=leading, leader=top.identity if top else None,
                   until=own.deadline - margin if leading and own else None,
                   rivals_until=max((p.deadline - margin for p in others), default=None),
                   own_entry_live=own_live, own_entry_stale=own is not None and not own_live)


class Gate:
    """Open within a window (UTC datetimes: from, until), or always when peering is off.

    Set by the watcher thread, read by handler threads before each write. wait_s: how long a
    handler waits for it to open (see wait_open).
    """

    def __init__(self, enabled: bool, clock: Callable[[], datetime], wait_s: float = 0.0) -> None:
        self.enabled = enabled
        self.wait_s = wait_s
        self._clock = clock
        self._window: tuple[datetime, datetime] | None = None
        self._lock = threading.Lock()

    def set(self, window: tuple[datetime, datetime] | None) -> None:
        with self._lock:
            self._window = window

    def may_write(self) -> bool:
        if not self.enabled:
            return True
        with self._lock:
            window = self._window
        return window is not None and window[0] <= self._clock() < window[1]

    def wait_open(self, timeout_s: float) -> bool:
        """may_write(), waiting up to timeout_s for it: kopf resumes a replica on the peering event
        that our watcher reads a poll later, and a change handler skipped then is lost until resync."""
        deadline = time.monotonic() + timeout_s
        while not self.may_write():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True


class GatedApiClient(kubernetes.client.ApiClient):
    """An ApiClient whose writes (any method but GET/HEAD/OPTIONS) pass the Gate or raise
    NotLeading; its User-Agent names the replica, so API audit logs (and tests) tell writers apart."""

    def __init__(self, configuration: kubernetes.client.Configuration, gate: Gate, identity: str) -> None:
        super().__init__(configuration=configuration)
        self.gate = gate
        self.user_agent = f"scoring-fleet-operator/{identity}"

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method.upper() not in READ_METHODS and not self.gate.may_write():
            raise NotLeading(f"not the leader: {method} {url.split('?')[0]} not sent")
        return super().call_api(method, url, *args, **kwargs)


def leading_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A kopf handler that does nothing while this replica may not write, and ends quietly when the
    Gate shuts mid-way (NotLeading): no retry, no error (kopf would post an Event: a write)."""
    @functools.wraps(fn)
    def handler(memo: Any, **kwargs: Any) -> Any:
        gate = getattr(memo, "peering_gate", None)
        if gate is not None and not gate.wait_open(gate.wait_s):
            return None
        try:
            return fn(memo=memo, **kwargs)
        except NotLeading as e:
            log.info("Stopped a handler: %s", e)
            return None
    return handler
