"""GET /metrics from each pod, concurrently, and turn each answer into a load sample or a reason why not.

Owns the HTTP and the parsing of SGLang's gauges, and a Pod body's view as a PodSample; nothing
else. What a missing sample means is autoscaling/replicas.py's business; listing pods and writing status is
tick.py's (through kube.py). A failed or garbage
scrape is always "no sample, because ..." and never a load of zero.
"""
from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from fleet_operator.autoscaling.values import PodSample
from fleet_operator.clock import Clock, utc_now

RUNNING_SERIES = "sglang:num_running_reqs"
WAITING_SERIES = "sglang:num_queue_reqs"
# A /metrics page is a few KiB; anything this big is not a scoring server.
MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Gauges:
    """One pod's sequences at the scrape, summed over its label sets (tp/dp ranks)."""

    running: float
    waiting: float

    @property
    def load(self) -> float:
        return self.running + self.waiting


@dataclass(frozen=True)
class ScrapeResult:
    """gauges, or None with error saying why."""

    gauges: Gauges | None
    scraped_at: datetime
    error: str = ""

    @property
    def load(self) -> float | None:
        return self.gauges.load if self.gauges else None


def parse_gauges(text: str) -> tuple[Gauges | None, str]:
    """running and waiting from Prometheus text, each summed over label sets; (None, why) if unusable."""
    values: dict[str, list[float]] = {RUNNING_SERIES: [], WAITING_SERIES: []}
    try:
        # NOTE: the parser keeps the "sglang:" prefix and gauge names as they are (counters lose _total
        # in the family name only), so matching on the sample name is exact.
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in values:
                    values[sample.name].append(sample.value)
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        return None, f"unparseable metrics: {exc}"
    absent = [name for name, found in values.items() if not found]
    if absent:
        return None, f"missing series {', '.join(absent)}"
    for name, found in values.items():
        bad = [v for v in found if not math.isfinite(v) or v < 0]
        if bad:
            return None, f"invalid value {bad[0]} for {name}"
    return Gauges(sum(values[RUNNING_SERIES]), sum(values[WAITING_SERIES])), ""


def total_gauges(results: Mapping[str, ScrapeResult]) -> Gauges:
    """Running and waiting summed over the pods that answered (status.running / status.waiting)."""
    answered = [r.gauges for r in results.values() if r.gauges]
    return Gauges(sum((g.running for g in answered), 0.0), sum((g.waiting for g in answered), 0.0))


async def fetch_gauges(session: aiohttp.ClientSession, url: str, timeout_s: float) -> tuple[Gauges | None, str]:
    """One GET; every failure becomes (None, why)."""
    text, error = await fetch_text(session, url, timeout_s)
    return (None, error) if text is None else parse_gauges(text)


async def fetch_text(session: aiohttp.ClientSession, url: str, timeout_s: float) -> tuple[str | None, str]:
    """One GET of a /metrics page: (its text, "") or (None, why); never raises for the network."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            if response.status != 200:
                return None, f"HTTP {response.status}"
            body = await response.content.read(MAX_BODY_BYTES + 1)
    except TimeoutError:
        return None, f"timeout after {timeout_s:g}s"
    except aiohttp.ClientError as exc:
        return None, f"connection error: {exc.__class__.__name__}: {exc}"
    if len(body) > MAX_BODY_BYTES:
        return None, f"response larger than {MAX_BODY_BYTES} bytes"
    try:
        return body.decode("utf-8"), ""
    except UnicodeDecodeError:
        return None, "unparseable metrics: not UTF-8"


def metrics_url(pod_ip: str, port: int) -> str:
    host = f"[{pod_ip}]" if ":" in pod_ip else pod_ip  # IPv6 pod IPs need brackets
    return f"http://{host}:{port}/metrics"


async def scrape_pods(pods: Iterable[Mapping], port: int, timeout_s: float,
                      session: aiohttp.ClientSession | None = None,
                      clock: Clock = utc_now) -> dict[str, ScrapeResult]:
    """Scrape every pod (Kubernetes Pod bodies: metadata.name, status.podIP) at once.

    Each GET has its own timeout_s, so the whole call takes about timeout_s at worst. Pods without
    an IP yet get a result with an error. Pass a session to reuse connections across intervals.
    """
    pods = list(pods)
    own_session = session is None
    session = session or aiohttp.ClientSession()
    try:
        results = await asyncio.gather(*(_scrape_one(session, pod, port, timeout_s, clock) for pod in pods))
    finally:
        if own_session:
            await session.close()
    return {_name(pod): result for pod, result in zip(pods, results)}


async def _scrape_one(session, pod: Mapping, port: int, timeout_s: float, clock) -> ScrapeResult:
    pod_ip = (pod.get("status") or {}).get("podIP")
    if not pod_ip:
        return ScrapeResult(None, clock(), "pod has no IP yet")
    gauges, error = await fetch_gauges(session, metrics_url(pod_ip, port), timeout_s)
    return ScrapeResult(gauges, clock(), error)  # stamped when the answer came, for staleness


def _name(pod: Mapping) -> str:
    return pod["metadata"]["name"]


def pod_sample(pod: Mapping, result: ScrapeResult | None) -> PodSample:
    """The decision's view of one Pod body and its scrape (None: not scraped)."""
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return PodSample(
        name=_name(pod),
        phase=status.get("phase") or "Unknown",
        ready=ready,
        deleting=bool((pod.get("metadata") or {}).get("deletionTimestamp")),
        load=result.load if result else None,
        scraped_at=result.scraped_at if result else None,
        error=result.error if result else "not scraped",
    )


def is_serving(pod: Mapping) -> bool:
    """Running, ready and not being deleted: a pod its Service sends requests to (fleet or gateway)."""
    sample = pod_sample(pod, None)
    return sample.phase == "Running" and sample.ready and not sample.deleting
