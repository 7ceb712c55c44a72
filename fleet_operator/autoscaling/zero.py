"""Scale to and from zero, driven by the requests waiting at the fleet's gateway. Pure: no I/O.

Only a fleet whose minReplicas is 0 (allowed with the gateway, native mode) goes to or leaves 0.
At 0 there are no pods to scrape: the gateway's waiting gauge is the only demand signal, and it
takes the fleet to 1 at once (no stabilization, no rate limit: a request is waiting). Going to 0
is the ordinary scale-down path (its window applies) plus one guard here: never while the
gateway's count is unknown or a request waits.
"""
from __future__ import annotations

from fleet_operator.autoscaling.values import GatewayDemand
from fleet_operator.spec.autoscaling import AutoscalingSpec

NO_GATEWAY = GatewayDemand(None, "the fleet has no gateway")


def at_zero(current: int, spec: AutoscalingSpec, gateway: GatewayDemand | None) -> tuple[int, str] | None:
    """(replicas, reason) for a fleet at 0 that may scale from zero; None for every other fleet."""
    if current != 0 or spec.min_replicas != 0:
        return None
    waiting = (gateway or NO_GATEWAY).waiting
    if waiting is None:
        # unknown demand: nothing to wake for, and nothing to lose. Its own reason: GatewayUnknown
        # is the guard's "not to 0" (ScalingLimited), and this fleet is at 0 already.
        return 0, "ZeroGatewayUnknown"
    if waiting > 0:
        return 1, "ScaleFromZero"  # 1, not more: its load, once it serves, sizes the rest
    return 0, "NoDemand"


def guard_zero(desired: int, current: int, spec: AutoscalingSpec,
               gateway: GatewayDemand | None) -> tuple[int, str]:
    """Never down to 0 while the gateway's waiting count is unknown or requests wait: keep 1."""
    if desired > 0 or current == 0 or spec.min_replicas != 0:
        return desired, ""
    waiting = (gateway or NO_GATEWAY).waiting
    if waiting is None:
        return 1, "GatewayUnknown"
    if waiting > 0:
        return 1, "GatewayWaiting"
    return desired, ""
