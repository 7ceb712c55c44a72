"""The operator's context: what every handler call needs, built once at start-up and passed in.

OperatorConfig (settings read once from the environment), FleetLocks (one lock per fleet within the
process) and OperatorContext, which bundles them with the API client and the clock. No I/O here:
handlers.start() connects and builds the context.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from fleet_operator.clock import Clock, utc_now
from scoringfleet_contract.facts import ENV_PREFIX

# The operator's settings (the chart sets them; only the operator reads them).
DEFAULT_IMAGE_ENV = ENV_PREFIX + "DEFAULT_IMAGE"
GATEWAY_IMAGE_ENV = ENV_PREFIX + "GATEWAY_IMAGE"
RESYNC_INTERVAL_ENV = ENV_PREFIX + "RESYNC_INTERVAL_S"
PROMETHEUS_ADDRESS_ENV = ENV_PREFIX + "PROMETHEUS_ADDRESS"

# The operator's own namespace, from the downward API (the chart sets it): the fleets' NetworkPolicies
# admit it, since the native autoscaler scrapes the pods from there.
NAMESPACE_ENV = "POD_NAMESPACE"


def is_http_url(value: str | None) -> bool:
    """An http(s) URL with a host: the one check of a Prometheus address (the operator's, a fleet's,
    the ScaledObject's)."""
    url = urlsplit(value or "")
    return url.scheme in ("http", "https") and bool(url.netloc)


@dataclass(frozen=True)
class OperatorConfig:
    """Operator-wide settings, read once at start-up."""

    default_image: str | None = None  # the server image: used by CPU fleets without spec.image
    # the control image (no torch): gateway pods of fleets without spec.gateway.image; None: the
    # fleet's own image, which has the gateway too.
    gateway_image: str | None = None
    # Services, PDBs and HPAs are not watched: every fleet is re-applied this often (drift, misses).
    resync_interval_s: float = 30.0
    # keda mode's trigger queries this Prometheus unless a fleet names its own.
    prometheus_address: str | None = None
    # None (run outside a pod, or without the env): the NetworkPolicies name no operator namespace.
    namespace: str | None = None

    def __post_init__(self) -> None:
        if not self.resync_interval_s > 0:
            raise ValueError(f"resync_interval_s must be > 0, got {self.resync_interval_s}")
        if self.prometheus_address is not None and not is_http_url(self.prometheus_address):
            raise ValueError(f"{PROMETHEUS_ADDRESS_ENV} must be an http(s) URL, got {self.prometheus_address!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> OperatorConfig:
        """SCORINGFLEET_DEFAULT_IMAGE, _GATEWAY_IMAGE, _RESYNC_INTERVAL_S, _PROMETHEUS_ADDRESS,
        POD_NAMESPACE (all optional)."""
        interval = environ.get(RESYNC_INTERVAL_ENV)
        return cls(default_image=environ.get(DEFAULT_IMAGE_ENV) or None,
                   gateway_image=environ.get(GATEWAY_IMAGE_ENV) or None,
                   resync_interval_s=float(interval) if interval else cls.resync_interval_s,
                   prometheus_address=environ.get(PROMETHEUS_ADDRESS_ENV) or None,
                   namespace=environ.get(NAMESPACE_ENV) or None)


@dataclass
class FleetLocks:
    """One lock per fleet: handlers of a fleet and of its Deployment may run in parallel threads.

    An optimisation, not the guard against lost writes: status patches carry a resourceVersion
    (kube.update_fleet_status), so two writers in two processes cannot clobber each other either.
    """

    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def for_fleet(self, namespace: str, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((namespace, name), threading.Lock())


@dataclass(frozen=True)
class OperatorContext:
    """The API client (a kubernetes.client.ApiClient), settings, per-fleet locks and the clock."""

    api: Any
    config: OperatorConfig = field(default_factory=OperatorConfig)
    locks: FleetLocks = field(default_factory=FleetLocks)
    clock: Clock = utc_now
