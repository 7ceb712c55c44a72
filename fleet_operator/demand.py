"""The fleet's demand as the gateways that route to it see it: GET each ready gateway pod's
/metrics, concurrently, and sum scoringfleet_gateway_waiting_requests{fleet="<the fleet>"} into a
GatewayDemand.

I/O, like scraper.py (whose GET it shares). Unknown, never 0, unless every ready gateway pod
answered with the gauge: a request waiting at a pod that did not answer must still wake the fleet.
A gateway pod may route to several fleets (spec.gateway.fleets): only its series labelled with this
fleet count (an unlabelled one is a gateway of one fleet from before the label). Each pod is read on
its own container port `http`: another fleet's gateway listens on that fleet's spec.gateway.port.
What the demand means for the size is autoscaling/zero.py's.
"""
from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Mapping

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from fleet_operator.autoscaling.values import GatewayDemand
from fleet_operator.scraper import fetch_text, is_serving, metrics_url
from scoringfleet_contract.facts import http_port

WAITING_SERIES = "scoringfleet_gateway_waiting_requests"
FLEET_LABEL = "fleet"  # the gateway's label on it: which of its fleets the requests wait for


def parse_waiting(text: str, fleet: str | None = None) -> tuple[float | None, str]:
    """The waiting gauge of `fleet` (None: every series) from Prometheus text; (None, why) when
    absent or not a count."""
    try:
        found = [s.value for family in text_string_to_metric_families(text)
                 for s in family.samples if s.name == WAITING_SERIES
                 and (fleet is None or s.labels.get(FLEET_LABEL, fleet) == fleet)]
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        return None, f"unparseable metrics: {exc}"
    if not found:
        which = WAITING_SERIES if fleet is None else f'{WAITING_SERIES}{{{FLEET_LABEL}="{fleet}"}}'
        return None, f"missing series {which}"
    if any(not math.isfinite(v) or v < 0 for v in found):
        return None, f"invalid value for {WAITING_SERIES}"
    return sum(found), ""


def serving_gateway_pods(pods: Iterable[Mapping]) -> list[Mapping]:
    """The gateway pods the Service sends requests to: Running, ready, not terminating."""
    return [pod for pod in pods if is_serving(pod)]


async def scrape_gateway(pods: Iterable[Mapping], fleet: str, port: int, timeout_s: float) -> GatewayDemand:
    """Requests for `fleet` waiting over the serving pods (Pod bodies) of the gateways that route to
    it, or unknown with why. `port`: a pod's when it names no container port `http`."""
    serving = serving_gateway_pods(pods)
    if not serving:
        return GatewayDemand(None, "no ready gateway pod routes to this fleet")
    async with aiohttp.ClientSession() as session:
        answers = await asyncio.gather(*(_scrape_one(session, pod, fleet, http_port(pod) or port, timeout_s)
                                         for pod in serving))
    failed = [f"{name}: {why}" for name, (_, why) in answers if why]
    if failed:
        return GatewayDemand(None, "; ".join(failed))
    return GatewayDemand(sum(waiting for _, (waiting, _) in answers))


async def _scrape_one(session: aiohttp.ClientSession, pod: Mapping, fleet: str, port: int,
                      timeout_s: float) -> tuple[str, tuple[float | None, str]]:
    name, pod_ip = pod["metadata"]["name"], (pod.get("status") or {}).get("podIP")
    if not pod_ip:
        return name, (None, "pod has no IP yet")
    text, error = await fetch_text(session, metrics_url(pod_ip, port), timeout_s)
    return name, (None, error) if text is None else parse_waiting(text, fleet)
