"""kopf handlers: thin entry points into reconcile.py and tick.py, on a registry passed in.

No module-level decorators: register(registry) adds every handler to the registry it is given, so
each operator run (and each test) gets a fresh one instead of kopf's process-global default. The
OperatorContext is built once at start-up and kept in kopf's memo. Handlers turn kube.ApiError into
kopf's retry vocabulary: TemporaryError with exponential backoff for 409/429/5xx/unreachable,
PermanentError for the rest.
"""
from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator
from typing import Any

import kopf

from fleet_operator import kube, names
from fleet_operator.context import FleetLocks, OperatorConfig, OperatorContext
from fleet_operator.peering import leading_only
from fleet_operator.reconcile import owner_fleet, reconcile_fleet
from fleet_operator.tick import TICK_S, DeploymentMissing, autoscale_fleet, is_due, native_fleet

FLEETS = (names.GROUP, names.VERSION, names.PLURAL)
DEPLOYMENTS = ("apps", "v1", "deployments")
MAX_BACKOFF_S = 60.0


def backoff_s(retry: int) -> float:
    """Delay before retry number `retry` (0-based) of a failed API call: 1, 2, 4 ... 60 s."""
    return min(2.0 ** retry, MAX_BACKOFF_S)


def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_via_client(**kwargs)


def start(memo: kopf.Memo, config: OperatorConfig, logger: logging.Logger, **_: Any) -> None:
    if config.namespace is None:
        # Said once, at start-up: every fleet's NetworkPolicy then lacks the rule for the scrape.
        logger.warning("POD_NAMESPACE is not set: the fleets' NetworkPolicies cannot admit the "
                       "operator's namespace, so native autoscaling cannot scrape their pods where "
                       "NetworkPolicies are enforced (the chart sets it)")
    memo.context = OperatorContext(api=kube.connect(), config=config, locks=FleetLocks())


def stop(memo: kopf.Memo, **_: Any) -> None:
    memo.context.api.close()


def reconcile(name: str, namespace: str, uid: str, memo: kopf.Memo, retry: int,
              logger: logging.Logger, **_: Any) -> None:
    """create / update / resume / resync: one level-based path."""
    with _api_errors(retry):
        result = reconcile_fleet(memo.context, namespace, name, uid)
    if result is not None and result.spec_error:
        logger.warning("Invalid spec: %s", result.spec_error)  # no retry: a new spec wakes us


def child_changed(body: kopf.Body, type: str | None, memo: kopf.Memo,
                  logger: logging.Logger, **_: Any) -> None:
    """A fleet's (or its gateway's) Deployment changed (by anyone): re-apply, which reverts drift in
    managed fields and carries the gateway's ready pods to status.gateway."""
    owner = owner_fleet(body)
    if type is None or owner is None:  # None: the initial listing, which resume already covers
        return
    try:
        reconcile_fleet(memo.context, body["metadata"]["namespace"], owner[0], owner[1])
    except kube.ApiError as e:  # event handlers are not retried; the resync timer catches up
        logger.warning("Reconcile after a Deployment event failed: %s", e)


def autoscale(name: str, namespace: str, uid: str, spec: kopf.Spec, status: kopf.Status,
              memo: kopf.Memo, retry: int, logger: logging.Logger, **_: Any) -> None:
    """Native autoscaling: the timer ticks every TICK_S; a fleet acts once its scrape interval passed.

    The due check reads kopf's copy of the fleet (no API call per tick); the tick reads it afresh.
    """
    fleet = native_fleet(name, namespace, spec, memo.context.config)
    if fleet is None or not is_due(fleet, status, memo.context.clock()):
        return
    with _api_errors(retry):
        try:
            result = autoscale_fleet(memo.context, namespace, name, uid)
        except DeploymentMissing as e:
            raise kopf.TemporaryError(str(e), delay=backoff_s(retry)) from e
    if result is not None and result.event is not None:
        logger.info("Autoscaler: %s", result.decision.message)


def is_natively_autoscaled(name: str, namespace: str, spec: kopf.Spec, memo: kopf.Memo, **_: Any) -> bool:
    return native_fleet(name, namespace, spec, memo.context.config) is not None


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    kopf.on.login(registry=registry)(login)
    kopf.on.startup(registry=registry, id="start")(functools.partial(start, config=config))
    kopf.on.cleanup(registry=registry)(stop)
    # leading_only: a replica that may not write (peering.py) skips them quietly
    for on in (kopf.on.create, kopf.on.update, kopf.on.resume):
        on(*FLEETS, registry=registry, id="reconcile")(leading_only(reconcile))
    # Services, PDBs and HPAs are not watched: the timer re-applies every child now and then.
    kopf.timer(*FLEETS, registry=registry, id="resync", interval=config.resync_interval_s,
               initial_delay=config.resync_interval_s)(leading_only(reconcile))
    # sharp: ticks on a fixed grid, not TICK_S after the previous tick's end (a tick takes a scrape).
    kopf.timer(*FLEETS, registry=registry, id="autoscale", interval=TICK_S, sharp=True,
               when=is_natively_autoscaled)(leading_only(autoscale))
    kopf.on.event(*DEPLOYMENTS, registry=registry,
                  labels={names.FLEET_LABEL: kopf.PRESENT})(leading_only(child_changed))
    # the gateway's Deployment carries the gateway label instead (its pods are not scoring pods)
    kopf.on.event(*DEPLOYMENTS, registry=registry, id="gateway_changed",
                  labels={names.GATEWAY_LABEL: kopf.PRESENT})(leading_only(child_changed))


@contextlib.contextmanager
def _api_errors(retry: int) -> Iterator[None]:
    try:
        yield
    except kube.ApiError as e:
        if kube.is_retryable(e.status):
            raise kopf.TemporaryError(str(e), delay=backoff_s(retry)) from e
        raise kopf.PermanentError(str(e)) from e
