"""The HTTP side of the benchmarks: send /v1/score requests open-loop (each its own task at its send
time, regardless of responses) or closed-loop (a fixed number of requests, `concurrency` in flight),
and sample /get_load meanwhile for the peak running and waiting counts.

Loopback only: a URL whose host is not 127.x or localhost is refused before anything is sent.
Every loop is bounded: by the send schedule, the body list, or a per-request timeout.
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp

from bench.summary import CLIENT_ERROR, LoadPeaks, Outcome
from bench.workload import ScoreBody

SAMPLE_INTERVAL_S = 0.1


class NotLoopback(ValueError):
    """The benchmark only talks to servers on this machine."""


def check_loopback(url: str) -> str:
    """Return `url` without a trailing slash, or raise NotLoopback."""
    host = urlsplit(url).hostname or ""
    is_loopback = host == "localhost"
    if not is_loopback:
        try:
            is_loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            is_loopback = False
    if not is_loopback:
        raise NotLoopback(f"{url!r}: only loopback servers (127.0.0.0/8, localhost) are allowed")
    return url.rstrip("/")


@dataclass(frozen=True)
class RunResult:
    outcomes: list[Outcome]
    peaks: LoadPeaks


async def fetch_vocab_size(url: str, timeout_s: float = 10.0) -> int:
    """The served model's vocabulary size, from /get_server_info."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        async with session.get(f"{check_loopback(url)}/get_server_info") as response:
            response.raise_for_status()
            return int((await response.json())["vocab_size"])


async def run_open_loop(url: str, bodies: list[ScoreBody], send_times_s: list[float],
                        timeout_s: float) -> RunResult:
    """Send bodies[i] at send_times_s[i] seconds after the start, each in its own task."""
    if len(bodies) < len(send_times_s):
        raise ValueError(f"{len(send_times_s)} send times but only {len(bodies)} bodies")
    url = check_loopback(url)
    payloads = encode(bodies)
    async with _session(timeout_s) as session, _Sampler(session, url) as sampler:
        start = time.perf_counter()
        tasks = []
        for payload, send_s in zip(payloads, send_times_s):
            await asyncio.sleep(max(0.0, start + send_s - time.perf_counter()))
            tasks.append(asyncio.create_task(post_score(session, url, payload, start)))
        outcomes = await asyncio.gather(*tasks)
    return RunResult(list(outcomes), sampler.peaks)


async def run_closed_loop(url: str, bodies: list[ScoreBody], concurrency: int,
                          timeout_s: float) -> RunResult:
    """Send every body once, keeping `concurrency` requests in flight (a saturation measurement)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    url = check_loopback(url)
    queue = list(reversed(encode(bodies)))
    outcomes: list[Outcome] = []

    async def worker(session: aiohttp.ClientSession, start: float) -> None:
        while queue:  # one event loop: pop() cannot race
            outcomes.append(await post_score(session, url, queue.pop(), start))

    async with _session(timeout_s) as session, _Sampler(session, url) as sampler:
        start = time.perf_counter()
        await asyncio.gather(*(worker(session, start) for _ in range(concurrency)))
    return RunResult(outcomes, sampler.peaks)


@dataclass(frozen=True)
class Payload:
    data: bytes
    num_items: int


def encode(bodies: list[ScoreBody]) -> list[Payload]:
    """JSON-encode before the clock starts: the client shares the CPU with the server."""
    return [Payload(json.dumps(body.to_json()).encode(), len(body.items)) for body in bodies]


async def post_score(session: aiohttp.ClientSession, url: str, payload: Payload,
                     start: float) -> Outcome:
    """POST one request; status CLIENT_ERROR (0) if no HTTP answer came (refused, timeout)."""
    sent_s = time.perf_counter() - start
    try:
        async with session.post(f"{url}/v1/score", data=payload.data,
                                headers={"Content-Type": "application/json"}) as response:
            await response.read()
            status = response.status
    except (aiohttp.ClientError, asyncio.TimeoutError):
        status = CLIENT_ERROR
    return Outcome(status, sent_s, time.perf_counter() - start, payload.num_items)


def _session(timeout_s: float) -> aiohttp.ClientSession:
    # limit=0: no client-side connection cap, or an open loop would quietly become a closed one.
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                 timeout=aiohttp.ClientTimeout(total=timeout_s))


class _Sampler:
    """GET /get_load every SAMPLE_INTERVAL_S while the block runs; keeps the peaks.
    running = num_reqs - num_waiting_reqs (SGLang's /get_load has no running field)."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session, self.url = session, url
        self.peaks = LoadPeaks()
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def __aenter__(self) -> _Sampler:
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *_) -> None:
        self._stop.set()
        await self._task

    async def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                async with self.session.get(f"{self.url}/get_load",
                                            timeout=aiohttp.ClientTimeout(total=2)) as response:
                    ranks = await response.json()
                self._record(sum(r["num_reqs"] - r["num_waiting_reqs"] for r in ranks),
                             sum(r["num_waiting_reqs"] for r in ranks))
            except (aiohttp.ClientError, asyncio.TimeoutError, KeyError, TypeError, ValueError):
                pass  # a missed sample is not a zero: the peaks simply skip it
            try:
                await asyncio.wait_for(self._stop.wait(), SAMPLE_INTERVAL_S)
            except asyncio.TimeoutError:
                pass

    def _record(self, running: int, waiting: int) -> None:
        p = self.peaks
        self.peaks = LoadPeaks(max(p.peak_running, running), max(p.peak_waiting, waiting),
                               p.num_samples + 1)
