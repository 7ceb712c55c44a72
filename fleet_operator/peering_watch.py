"""The replica's view of the peering: a thread that reads the peering object(s) every poll_s, moves
the Gate (peering.py), says in the log and on the object who leads, and demotes a leader that lost
its lease. Registered on the kopf registry after handlers.register: its startup handler wraps the
context's ApiClient in the Gate.

A replica that becomes the leader while another peer is still live (it preempted a working leader)
waits `settle_s` (a poll and a half) before writing, so the old leader's own watcher has shut its
gate. A leader whose own entry went stale (its keep-alives fail) lowers its kopf priority by
peering.DEMOTION: kopf then pauses it on the next peering event, and once its keep-alives land
again it stays a standby rather than taking the fleets back from the replica that took over.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from datetime import datetime, timedelta
from typing import Any

import kopf
import kubernetes.client

from fleet_operator import kube, names
from fleet_operator.clock import Clock, format_time, utc_now
from fleet_operator.peering import DEMOTION, GROUP_VERSION, Gate, GatedApiClient, PeeringConfig, Verdict, judge

LEADER_ANNOTATION = f"{names.ANNOTATION_PREFIX}/leader"
LEADER_SINCE_ANNOTATION = f"{names.ANNOTATION_PREFIX}/leader-since"

log = logging.getLogger(__name__)


def peering_paths(config: PeeringConfig) -> list[str]:
    """The ClusterKopfPeering (cluster-wide), or the KopfPeering in each watched namespace."""
    if not config.namespaces:
        return [f"/apis/{GROUP_VERSION}/clusterkopfpeerings/{config.name}"]
    return [f"/apis/{GROUP_VERSION}/namespaces/{ns}/kopfpeerings/{config.name}" for ns in config.namespaces]


class LeaseWatcher:
    """Reads the peering object(s) and keeps the Gate in step; one per operator process."""

    def __init__(self, api: kubernetes.client.ApiClient, config: PeeringConfig, settings: Any,
                 gate: Gate, clock: Clock = utc_now) -> None:
        self.api, self.config, self.settings, self.gate, self.clock = api, config, settings, gate, clock
        self.leading = False
        self.rivals_until: datetime | None = None  # from the previous reading
        self.opens: datetime | None = None  # when the gate opened (or opens: after settling)
        self.described = ""
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="peering watcher", daemon=True)

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.check()
            except Exception:  # the thread must outlive any one bad reading; the gate shuts by time
                log.exception("Reading the peering object failed")
            self.stopping.wait(self.config.poll_s)

    def read(self) -> Verdict | None:
        """The verdict from a fresh read of every peering object; None when one cannot be read."""
        statuses = []
        for path in peering_paths(self.config):
            try:
                statuses.append(kube.request(self.api, "GET", path).get("status"))
            except kube.ApiError as e:
                log.warning("Cannot read the peering object %s: %s", path, e)
                if e.status == 404:
                    self._create(path)
                return None
        return judge(statuses, self.config.identity, self.settings.peering.priority, self.clock(),
                     self.config.margin_s)

    def check(self) -> None:
        """One reading: the gate's new window, and what changed said (and done) once."""
        verdict = self.read()
        if verdict is None:
            return  # the gate keeps its window, which ends with the lease we last proved
        if verdict.leading and not self.leading:
            settle = self._settle(verdict)
            self.opens = self.clock() + settle
            self.gate.set((self.opens, verdict.until))
            self._took_over(settle)
        elif verdict.leading:
            self.gate.set((self.opens, verdict.until))
        else:
            self.gate.set(None)
            if self.leading and verdict.own_entry_stale:  # absent: kopf wrote us out (exiting)
                self._demote()
        self.leading = verdict.leading
        self.rivals_until = verdict.rivals_until
        self._say(verdict)

    def _settle(self, verdict: Verdict) -> timedelta:
        """How long a new leader waits before writing: while the peer that led may still be writing,
        i.e. until its lease as last read would end, but no longer than it takes the old leader's
        own watcher to notice it left (a poll and a half). A dead leader's lease has ended: none."""
        rivals = [t for t in (self.rivals_until, verdict.rivals_until) if t is not None]
        left = (max(rivals) - self.clock()) if rivals else timedelta(0)
        return max(timedelta(0), min(left, timedelta(seconds=1.5 * self.config.poll_s)))

    def _create(self, path: str) -> None:
        """The peering object, when the chart did not make it (kopf waits for it, paused)."""
        collection, name = path.rsplit("/", 1)
        kind = "KopfPeering" if "/namespaces/" in path else "ClusterKopfPeering"
        body = {"apiVersion": GROUP_VERSION, "kind": kind, "metadata": {"name": name}}
        try:
            kube.request(self.api, "POST", collection, body)
            log.info("Created the peering object %s", path)
            # kopf's first keep-alive found no object, its next is lifetime - 5..10 s away: write
            # this one now, as kopf writes it, so that the first replica need not wait for it.
            entry = {"priority": self.settings.peering.priority, "lifetime": self.config.lifetime_s,
                     "lastseen": format_time(self.clock())}
            kube.request(self.api, "PATCH", path, {"status": {self.config.identity: entry}}, kube.MERGE_PATCH)
        except kube.ApiError as e:  # 409: a peer made it first; 404: no peering CRD (kopf says so)
            log.warning("Could not create the peering object %s: %s", path, e)

    def _took_over(self, settle: timedelta) -> None:
        log.info("Leading (identity %s, priority %d)%s", self.config.identity,
                 self.settings.peering.priority,
                 f"; writing in {settle.total_seconds():g} s, once the previous leader has paused"
                 if settle else "")
        since = format_time(self.clock().replace(microsecond=0))  # a `date` printer column: whole seconds
        patch = {"metadata": {"annotations": {LEADER_ANNOTATION: self.config.identity,
                                              LEADER_SINCE_ANNOTATION: since}}}
        for path in peering_paths(self.config):
            try:
                kube.request(self.api, "PATCH", path, patch, kube.MERGE_PATCH)
            except kube.ApiError as e:  # only the display suffers
                log.warning("Could not mark %s as led by %s: %s", path, self.config.identity, e)

    def _demote(self) -> None:
        self.settings.peering.priority -= DEMOTION
        log.warning("Lost the lease (keep-alives not landing): stopped writing; priority lowered to %d "
                    "so that kopf pauses and the replica that takes over keeps the lead",
                    self.settings.peering.priority)

    def _say(self, verdict: Verdict) -> None:
        """Standing by (and why) in the log, once per change; taking over is said by _took_over."""
        described = "leading" if verdict.leading else verdict.describe()
        if described != self.described and not verdict.leading:
            log.info("Not writing: %s", described)
        self.described = described


def register(registry: kopf.OperatorRegistry, config: PeeringConfig, clock: Clock = utc_now) -> None:
    """The watcher's start and stop, and a `leading` probe in /healthz's answer. Register after
    handlers.register: its start-up handler wraps the context that handlers.start made."""
    def start(memo: kopf.Memo, settings: kopf.OperatorSettings, **_: Any) -> None:
        # a poll to see the takeover, at most 1.5 for the old leader's gate to shut (_settle), slack
        gate = Gate(config.enabled, clock, wait_s=3 * config.poll_s)
        memo.peering_gate = gate
        # The ungated client: the watcher's; closed here at stop (handlers.stop closes the gated one).
        memo.peering_plain_api = plain = memo.context.api
        memo.context = dataclasses.replace(
            memo.context, api=GatedApiClient(plain.configuration, gate, config.identity))
        log.info("Peering %s: identity %s, priority %d, lifetime %d s", config.name if config.enabled
                 else "off (writes not gated)", config.identity, config.priority, config.lifetime_s)
        if config.enabled:
            memo.peering_watcher = LeaseWatcher(plain, config, settings, gate, clock)
            memo.peering_watcher.thread.start()

    def stop(memo: kopf.Memo, **_: Any) -> None:
        memo.peering_gate.set(None)
        watcher = memo.get("peering_watcher")
        if watcher is not None:
            watcher.stopping.set()
            watcher.thread.join(timeout=5)
        memo.peering_plain_api.close()

    def leading(memo: kopf.Memo, **_: Any) -> bool:
        return memo.peering_gate.may_write()

    kopf.on.startup(registry=registry, id="peering")(start)
    kopf.on.cleanup(registry=registry, id="peering")(stop)
    kopf.on.probe(registry=registry, id="leading")(leading)
