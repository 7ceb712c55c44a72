"""One native autoscaling tick of one fleet: read, scrape, decide; then scale, record and explain.

The I/O sequence around autoscaler.decide(), as reconcile.py is for reconcile: the fleet and its Pods
through kube.py, the pods' /metrics through scraper.py, the status fields from status.py. It writes
the fleet's scale subresource (never the Deployment: the reconciler carries .spec.replicas there),
status desiredReplicas / running / waiting / lastDecision / autoscalerHistory / lastScaleTime, the
MetricsAvailable / MetricsDegraded / ScalingLimited conditions, and an Event when the decision is news.

NOTE: synchronous on purpose. kube.py blocks, and FleetLocks are threading locks shared with the
reconcile handlers, which kopf runs in its thread pool; so the timer is a sync handler (a worker
thread) too, and only the scrape, which wants concurrency, runs in a short-lived event loop of its
own (asyncio.run). An async handler on kopf's loop would need a thread hop for every API call and
could not wait for a fleet's lock without blocking every other handler.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import kubernetes.client

from fleet_operator import kube
from fleet_operator.autoscaler import decide
from fleet_operator.decision import Decision
from fleet_operator.history import history_from_status, parse_time
from fleet_operator.reconcile import FleetLocks, OperatorConfig
from fleet_operator.scraper import pod_sample, scrape_pods, total_gauges, utc_now
from fleet_operator.spec import FleetSpec, SpecError, parse_autoscaling, parse_fleet
from fleet_operator.status import autoscaler_status, status_patch

# The timer's fixed interval. kopf gives a timer one interval for all objects, so it ticks this
# often and each fleet acts when its own scrapeIntervalSeconds has passed (is_due).
TICK_S = 1.0
# A scrape must end well within the interval, or samples would pile up behind slow pods.
MAX_SCRAPE_TIMEOUT_S = 2.0


class DeploymentMissing(Exception):
    """The fleet's Deployment does not exist yet (the create handler has not run): try again soon."""


@dataclass(frozen=True)
class TickResult:
    decision: Decision
    event: tuple[str, str, str] | None  # (type, reason, message) of the Event posted, if any


def is_native(spec: Mapping[str, Any] | None) -> bool:
    """spec.autoscaling.enabled and mode native (the default): the operator sizes the fleet."""
    autoscaling = (spec or {}).get("autoscaling")
    return (isinstance(autoscaling, Mapping) and autoscaling.get("enabled") is True
            and autoscaling.get("mode", "native") == "native")


def is_due(spec: Mapping[str, Any] | None, status: Mapping[str, Any] | None, now: datetime,
           tick_s: float = TICK_S) -> bool:
    """True once scrapeIntervalSeconds has passed since status.lastDecision.time, to within half a
    tick (else a 1 s interval on a 1 s tick would act every other tick). An invalid autoscaling spec
    is never due: the reconciler reports it, and a spec change brings the fleet back."""
    try:
        interval_s = parse_autoscaling((spec or {}).get("autoscaling")).scrape_interval_s
    except SpecError:
        return False
    last = ((status or {}).get("lastDecision") or {}).get("time")
    try:
        last_at = parse_time(last)
    except (TypeError, ValueError):
        return True  # never decided (or a hand-edited time): decide now
    return (now - last_at).total_seconds() >= interval_s - tick_s / 2


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


def autoscale_fleet(api: kubernetes.client.ApiClient, namespace: str, name: str,
                    config: OperatorConfig, locks: FleetLocks,
                    clock: Callable[[], datetime] = utc_now, uid: str | None = None) -> TickResult | None:
    """One decision for one fleet, applied and recorded. Raises DeploymentMissing, kube.ApiError.

    None when there is nothing to do: the fleet is gone, being deleted, another fleet of that name
    (given `uid`), invalid, not in native mode, or resized by someone else during the tick (the next
    tick decides from the new size).
    """
    # NOTE: the decision is timed at the tick's start, not after the scrape: is_due then measures
    # whole ticks, and a scrape that takes half a tick does not push every decision a tick later.
    now = clock()
    body = kube.get_fleet(api, namespace, name)
    fleet = _native_fleet(body, config, uid)
    if fleet is None:
        return None
    if kube.get(api, "apps/v1", "Deployment", namespace, name) is None:
        raise DeploymentMissing(f"the Deployment of {namespace}/{name} does not exist yet")
    pods = kube.list_fleet_pods(api, namespace, name)
    # Only pods that can count are scraped; the others' states come from their Pod bodies.
    serving = [p for p in pods if _is_serving(p)]
    results = asyncio.run(scrape_pods(serving, fleet.server.port,
                                      scrape_timeout_s(fleet.autoscaling.scrape_interval_s)))
    samples = [pod_sample(p, results.get(p["metadata"]["name"])) for p in pods]
    history = history_from_status((body.get("status") or {}).get("autoscalerHistory"))
    decision = decide(samples, fleet.replicas, fleet.autoscaling, history, now)
    gauges = total_gauges(results)
    with locks.for_fleet(namespace, name):
        return _apply(api, namespace, name, config, body["metadata"]["uid"], decision,
                      gauges.running, gauges.waiting)


def _native_fleet(body: Mapping[str, Any] | None, config: OperatorConfig,
                  uid: str | None) -> FleetSpec | None:
    """The fleet's spec if it is there, valid and natively autoscaled, else None."""
    if body is None or body["metadata"].get("deletionTimestamp") \
            or (uid is not None and body["metadata"].get("uid") != uid) \
            or not is_native(body.get("spec")):
        return None
    meta = body["metadata"]
    try:
        return parse_fleet(meta["name"], meta["namespace"], body.get("spec"), config.default_image)
    except SpecError:
        return None  # the reconciler reports it (SpecValid=False); nothing to size until fixed


def _is_serving(pod: Mapping[str, Any]) -> bool:
    sample = pod_sample(pod, None)
    return sample.phase == "Running" and sample.ready and not sample.deleting


def _apply(api: kubernetes.client.ApiClient, namespace: str, name: str, config: OperatorConfig,
           uid: str, decision: Decision, running: float, waiting: float) -> TickResult | None:
    """Under the fleet's lock: scale, then status, then the Event (HPA's order: act, then record).

    The fleet is read again, so the conditions merge over what the reconciler last wrote, and a
    size changed by someone else since the tick began wins.
    """
    body = kube.get_fleet(api, namespace, name)
    fleet = _native_fleet(body, config, uid)
    if fleet is None or fleet.replicas != decision.current_replicas:
        return None
    if decision.is_rescale:
        kube.scale_fleet(api, namespace, name, decision.desired_replicas)
    current = body.get("status") or {}
    new = autoscaler_status(current, decision, running, waiting, body["metadata"].get("generation"))
    patch = status_patch(current, new)
    if patch:
        kube.patch_fleet_status(api, namespace, name, patch)
    event = event_for(decision, current.get("lastDecision"))
    if event is not None:
        kube.post_event(api, body, *event, decision.time)
    return TickResult(decision, event)
