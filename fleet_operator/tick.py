"""One native autoscaling tick of one fleet: read, scrape, decide; then scale, record and explain.

The I/O around autoscaling/decide(), as reconcile.py is for reconcile: the fleet and its Pods through kube.py
(read and parsed once per tick), the pods' /metrics through scraper.py (and, with the gateway,
its pods' waiting requests through demand.py, in the same event loop), the status fields from
status/. It writes the fleet's scale subresource (never the Deployment: the reconciler carries
.spec.replicas there), the autoscaler's status fields and conditions, and an Event when the decision
is news; before a scale-down, the pods' deletion costs (autoscaling/scale_in.py), so the idlest go.

NOTE: synchronous on purpose. kube.py blocks, and FleetLocks are threading locks shared with the
reconcile handlers, which kopf runs in its thread pool; so the timer is a sync handler (a worker
thread) too, and only the scrape, which wants concurrency, runs in a short-lived event loop of its
own (asyncio.run).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fleet_operator import kube, names
from fleet_operator.autoscaling.decide import decide
from fleet_operator.autoscaling.history import history_from_status
from fleet_operator.autoscaling.scale_in import DELETION_COST, cost_patches, deletion_costs, with_pods_to_go
from fleet_operator.autoscaling.values import Decision, GatewayDemand
from fleet_operator.clock import parse_time
from fleet_operator.context import OperatorConfig, OperatorContext
from fleet_operator.demand import scrape_gateway
from fleet_operator.scraper import ScrapeResult, is_serving, pod_sample, scrape_pods, total_gauges
from fleet_operator.spec.fleet import FleetSpec, SpecError, parse_fleet
from fleet_operator.status.autoscaler import autoscaler_status
from fleet_operator.status.ownership import status_patch

# The timer's fixed interval. kopf gives a timer one interval for all objects, so it ticks this
# often and each fleet acts when its own scrapeIntervalSeconds has passed (is_due).
TICK_S = 1.0
# A scrape must end well within the interval, or samples would pile up behind slow pods.
MAX_SCRAPE_TIMEOUT_S = 2.0
# A scale write refused because the fleet changed under it is retried over a fresh read this often.
MAX_SCALE_ATTEMPTS = 3

log = logging.getLogger(__name__)


class DeploymentMissing(Exception):
    """The fleet's Deployment does not exist yet (the create handler has not run): try again soon."""


@dataclass(frozen=True)
class TickResult:
    decision: Decision
    event: tuple[str, str, str] | None  # (type, reason, message) of the Event posted, if any


def native_fleet(name: str, namespace: str, spec: Mapping[str, Any] | None,
                 config: OperatorConfig) -> FleetSpec | None:
    """The fleet through the one parse (spec.fleet.parse_fleet) if it is valid and natively
    autoscaled, else None: an invalid spec is the reconciler's to report (SpecValid=False), and
    nothing is sized until it is fixed."""
    try:
        fleet = parse_fleet(name, namespace, spec, config)
    except SpecError:
        return None
    return fleet if fleet.autoscaling.is_native else None


def is_due(fleet: FleetSpec, status: Mapping[str, Any] | None, now: datetime,
           tick_s: float = TICK_S) -> bool:
    """True once scrapeIntervalSeconds has passed since status.lastDecision.time, to within half a
    tick (else a 1 s interval on a 1 s tick would act every other tick)."""
    last = ((status or {}).get("lastDecision") or {}).get("time")
    try:
        last_at = parse_time(last)
    except (TypeError, ValueError):
        return True  # never decided (or a hand-edited time): decide now
    return (now - last_at).total_seconds() >= fleet.autoscaling.scrape_interval_s - tick_s / 2


def scrape_timeout_s(interval_s: float) -> float:
    return min(MAX_SCRAPE_TIMEOUT_S, interval_s / 2)


def event_for(decision: Decision, last_decision: Mapping[str, Any] | None) -> tuple[str, str, str] | None:
    """(type, reason, message) of the Event a decision deserves, or None when it is not news.

    Normal for a rescale or a new reason; Warning while metrics are degraded (its first decision and
    every change after), with the pods that have no sample named.
    """
    if not decision.is_news(last_decision):
        return None
    if decision.degraded:
        why = decision.condition("MetricsDegraded").message
        return "Warning", decision.reason, f"{decision.message}; {why}"
    return "Normal", decision.reason, decision.message


def autoscale_fleet(ctx: OperatorContext, namespace: str, name: str,
                    uid: str | None = None) -> TickResult | None:
    """One decision for one fleet, applied and recorded. Raises DeploymentMissing, kube.ApiError.

    None when there is nothing to do: the fleet is gone, being deleted, another fleet of that name
    (given `uid`), invalid, not in native mode, or changed by someone else during the tick (the next
    tick decides from the new state).
    """
    # NOTE: the decision is timed at the tick's start, not after the scrape: is_due then measures
    # whole ticks, and a scrape that takes half a tick does not push every decision a tick later.
    now = ctx.clock()
    body = kube.get_fleet(ctx.api, namespace, name)
    fleet = _native_fleet(body, ctx, uid)
    if fleet is None:
        return None
    if kube.get(ctx.api, "apps/v1", "Deployment", namespace, name) is None:
        raise DeploymentMissing(f"the Deployment of {namespace}/{name} does not exist yet")
    pods = kube.list_fleet_pods(ctx.api, namespace, name)
    # Only pods that can count are scraped; the others' states come from their Pod bodies.
    serving = [p for p in pods if is_serving(p)]
    # the gateways' demand decides only for a fleet that may go to 0: its own gateway's pods and
    # those of another fleet's gateway that routes to it (spec.gateway.fleets) carry its label
    gateway_pods = kube.list_pods(ctx.api, namespace, names.serves_selector_string(name)) \
        if fleet.autoscaling.min_replicas == 0 else None
    results, gateway = asyncio.run(_scrape(serving, gateway_pods, fleet, ctx))
    samples = [pod_sample(p, results.get(p["metadata"]["name"])) for p in pods]
    history = history_from_status((body.get("status") or {}).get("autoscalerHistory"))
    decision = with_pods_to_go(decide(samples, fleet.replicas, fleet.autoscaling, history, now, gateway))
    gauges = total_gauges(results)
    with ctx.locks.for_fleet(namespace, name):
        return _apply(ctx, body, decision, pods, gauges.running, gauges.waiting)


async def _scrape(serving: list[Mapping[str, Any]], gateway_pods: list[Mapping[str, Any]] | None,
                  fleet: FleetSpec, ctx: OperatorContext
                  ) -> tuple[dict[str, ScrapeResult], GatewayDemand | None]:
    """The serving pods' gauges and (gateway_pods given) the gateway's waiting requests, at once."""
    timeout_s = scrape_timeout_s(fleet.autoscaling.scrape_interval_s)
    pods = scrape_pods(serving, fleet.server.port, timeout_s, clock=ctx.clock)
    if gateway_pods is None:
        return await pods, None
    return tuple(await asyncio.gather(  # type: ignore[return-value]
        pods, scrape_gateway(gateway_pods, fleet.name, fleet.gateway.port, timeout_s)))


def _native_fleet(body: Mapping[str, Any] | None, ctx: OperatorContext,
                  uid: str | None) -> FleetSpec | None:
    """The fleet's spec if it is there, valid and natively autoscaled, else None."""
    if not kube.is_live_fleet(body, uid):
        return None
    meta = body["metadata"]
    return native_fleet(meta["name"], meta["namespace"], body.get("spec"), ctx.config)


def _set_deletion_costs(ctx: OperatorContext, namespace: str, pods: list[dict[str, Any]],
                        decision: Decision) -> None:
    """Idlest first: each pod's pod-deletion-cost from the decision's samples, patched only where it
    changes, before replicas go down. A pod that cannot be annotated for good (e.g. 403) is logged
    and the scale-down goes ahead in the ReplicaSet's own order (its drain still loses nothing); a
    retryable error fails the tick, which is retried."""
    current = {p["metadata"]["name"]: (p["metadata"].get("annotations") or {}).get(DELETION_COST)
               for p in pods}
    for name, value in cost_patches(deletion_costs(decision.pods), current).items():
        try:
            kube.annotate_pod(ctx.api, namespace, name, {DELETION_COST: value})
        except kube.ApiError as e:
            if kube.is_retryable(e.status):
                raise
            log.warning("could not set %s on pod %s/%s: %s", DELETION_COST, namespace, name, e)


def _apply(ctx: OperatorContext, read: Mapping[str, Any], decision: Decision,
           pods: list[dict[str, Any]], running: float, waiting: float) -> TickResult | None:
    """The scale write (_rescale: deletion costs first on a scale-down), then status, then the
    Event (HPA's order: act, then record).

    Only onto the fleet the decision was made for: the same object at the same generation (a
    resize or spec change since the tick began wins, and then no pod is annotated either). The
    scale write carries a resourceVersion, the status write too (kube.update_fleet_status), so no
    other writer's change is lost; the status write finds the scale's new resourceVersion by its
    409 and recomputes over the fresh fleet.
    """
    current = _rescale(ctx, read, decision, pods)
    if current is None:
        return None
    generation = current["metadata"].get("generation")

    def make_patch(fleet: Mapping[str, Any]) -> dict[str, Any]:
        status = fleet.get("status") or {}
        new = autoscaler_status(status, decision, running, waiting, generation)
        return status_patch("autoscaler", status, new, native=True)

    if kube.update_fleet_status(ctx.api, current, make_patch) is None:
        return None
    event = event_for(decision, (current.get("status") or {}).get("lastDecision"))
    if event is not None:
        kube.post_event(ctx.api, current, *event, decision.time)
    return TickResult(decision, event)


def _rescale(ctx: OperatorContext, read: Mapping[str, Any], decision: Decision,
             pods: list[dict[str, Any]]) -> Mapping[str, Any] | None:
    """Write the decision's size to the fleet's scale subresource, if it rescales: the fleet as
    read just before that write (or, with nothing to write, as read now), or None if it changed
    since the tick's read. On a scale-down the pods' deletion costs are written once, after that
    check and just before the first scale write. A write refused by a 409 is retried over a fresh
    read, MAX_SCALE_ATTEMPTS times in all."""
    meta = read["metadata"]
    for attempt in range(MAX_SCALE_ATTEMPTS):
        current = _same_fleet(ctx, read)
        if current is None:
            return None
        if not decision.is_rescale:
            return current
        if attempt == 0 and decision.pods_to_go:
            _set_deletion_costs(ctx, meta["namespace"], pods, decision)
        if _write_scale(ctx, current, decision.desired_replicas):
            return current
    return None


def _same_fleet(ctx: OperatorContext, read: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The fleet read afresh if it is still the one the tick read (same uid, same generation),
    else None."""
    meta = read["metadata"]
    current = kube.get_fleet(ctx.api, meta["namespace"], meta["name"])
    if not kube.is_live_fleet(current, meta["uid"]) \
            or current["metadata"].get("generation") != meta.get("generation"):
        return None
    return current


def _write_scale(ctx: OperatorContext, current: Mapping[str, Any], replicas: int) -> bool:
    """The scale write at `current`'s resourceVersion: False when a 409 says the fleet changed."""
    meta = current["metadata"]
    try:
        kube.scale_fleet(ctx.api, meta["namespace"], meta["name"], replicas, meta["resourceVersion"])
    except kube.ApiError as e:
        if e.status != 409:
            raise
        return False
    return True
