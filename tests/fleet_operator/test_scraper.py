"""scrape_pods against real HTTP servers on loopback (one address per pod, one shared port, as in a
fleet), and parse_gauges on real Prometheus text as prometheus_client writes it."""
from __future__ import annotations

import asyncio
import math
from datetime import datetime, timezone

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from fleet_operator.scraper import (
    Gauges,
    ScrapeResult,
    is_serving,
    metrics_url,
    parse_gauges,
    pod_sample,
    scrape_pods,
    total_gauges,
)
from tests.fleet_operator.loopback import free_port

LABELS = ["model_name", "engine_type", "tp_rank", "pp_rank"]


def sglang_text(running: list[float], waiting: list[float]) -> str:
    """What the scoring server exposes: one label set per tensor-parallel rank."""
    registry = CollectorRegistry()
    run = Gauge("sglang:num_running_reqs", "running", LABELS, registry=registry)
    queue = Gauge("sglang:num_queue_reqs", "waiting", LABELS, registry=registry)
    Gauge("sglang:token_usage", "usage", LABELS, registry=registry).labels("qwen", "unified", "0", "0").set(0.5)
    for rank, value in enumerate(running):
        run.labels("qwen", "unified", str(rank), "0").set(value)
    for rank, value in enumerate(waiting):
        queue.labels("qwen", "unified", str(rank), "0").set(value)
    return generate_latest(registry).decode()


GOOD = sglang_text([3, 2], [4, 0])
MISSING_QUEUE = "\n".join(line for line in GOOD.splitlines() if "num_queue_reqs" not in line) + "\n"


@pytest.mark.parametrize("text, gauges, error", [
    (GOOD, Gauges(5.0, 4.0), ""),
    (sglang_text([0], [0]), Gauges(0.0, 0.0), ""),
    ("sglang:num_running_reqs 1\nsglang:num_queue_reqs 2\n", Gauges(1.0, 2.0), ""),  # untyped, no labels
    (MISSING_QUEUE, None, "missing series sglang:num_queue_reqs"),
    ("", None, "missing series sglang:num_running_reqs, sglang:num_queue_reqs"),
    ("<html>bad gateway</html>", None, "unparseable metrics"),
    ("sglang:num_running_reqs{tp_rank=\"0\" 1\n", None, "unparseable metrics"),
    (sglang_text([math.nan], [1]), None, "invalid value nan for sglang:num_running_reqs"),
    (sglang_text([1], [-2]), None, "invalid value -2.0 for sglang:num_queue_reqs"),
    (sglang_text([math.inf], [1]), None, "invalid value inf"),
], ids=["two-ranks", "idle", "untyped", "missing-series", "empty", "html", "broken-labels", "nan",
        "negative", "inf"])
def test_parse_gauges(text, gauges, error):
    parsed, why = parse_gauges(text)
    assert parsed == gauges
    assert why.startswith(error) and bool(why) == bool(error)


@pytest.mark.parametrize("ip, url", [("10.0.0.7", "http://10.0.0.7:30000/metrics"),
                                     ("fd00::7", "http://[fd00::7]:30000/metrics")], ids=["ipv4", "ipv6"])
def test_metrics_url(ip, url):
    assert metrics_url(ip, 30000) == url


def pod(name: str, ip: str | None) -> dict:
    return {"metadata": {"name": name}, "status": {"podIP": ip} if ip else {}}


@pytest.fixture
async def fleet_servers():
    """Start one aiohttp server per pod address; all stopped (and slow handlers released) at the end."""
    runners: list[web.AppRunner] = []
    release = asyncio.Event()

    async def start(handlers: dict[str, web.RequestHandler]) -> int:
        port = free_port(list(handlers))
        for host, handler in handlers.items():
            app = web.Application()
            app.router.add_get("/metrics", handler)
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, host, port).start()
            runners.append(runner)
        return port

    start.release = release
    yield start
    release.set()
    for runner in reversed(runners):
        await runner.cleanup()


def text_handler(text: str, status: int = 200):
    async def handle(request):
        return web.Response(text=text, status=status, content_type="text/plain")
    return handle


def slow_handler(release: asyncio.Event):
    async def handle(request):
        await asyncio.wait_for(release.wait(), timeout=5)
        return web.Response(text=GOOD)
    return handle


async def test_scrape_pods_each_pod_its_own_answer(fleet_servers):
    port = await fleet_servers({
        "127.0.0.2": text_handler(GOOD),
        "127.0.0.3": text_handler("<html>oops</html>"),
        "127.0.0.4": text_handler(sglang_text([math.nan], [0])),
        "127.0.0.5": text_handler(sglang_text([1], [-1])),
        "127.0.0.6": slow_handler(fleet_servers.release),
        "127.0.0.7": text_handler("upstream failed", status=500),
        "127.0.0.8": text_handler(MISSING_QUEUE),
    })
    pods = [pod("good", "127.0.0.2"), pod("garbage", "127.0.0.3"), pod("nan", "127.0.0.4"),
            pod("negative", "127.0.0.5"), pod("slow", "127.0.0.6"), pod("error", "127.0.0.7"),
            pod("no-series", "127.0.0.8"), pod("refused", "127.0.0.9"), pod("no-ip", None)]
    results = await scrape_pods(pods, port, timeout_s=0.3)
    errors = {name: result.error for name, result in results.items()}
    assert results["good"].load == 9.0 and errors["good"] == ""
    assert all(results[name].load is None for name in results if name != "good")
    assert errors["garbage"].startswith("unparseable metrics")
    assert errors["nan"].startswith("invalid value nan")
    assert errors["negative"].startswith("invalid value -1.0")
    assert errors["slow"] == "timeout after 0.3s"
    assert errors["error"] == "HTTP 500"
    assert errors["no-series"] == "missing series sglang:num_queue_reqs"
    assert errors["refused"].startswith("connection error")
    assert errors["no-ip"] == "pod has no IP yet"
    assert total_gauges(results) == Gauges(5.0, 4.0)  # only the pod that answered


async def test_scrape_pods_stamps_with_the_given_clock_and_reuses_a_session(fleet_servers):
    port = await fleet_servers({"127.0.0.2": text_handler(GOOD)})
    stamp = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
    async with aiohttp.ClientSession() as session:
        for _ in range(2):
            results = await scrape_pods([pod("a", "127.0.0.2")], port, 1.0, session=session, clock=lambda: stamp)
            assert results == {"a": ScrapeResult(Gauges(5.0, 4.0), stamp, "")}
        assert not session.closed


@pytest.mark.parametrize("body, result, expected", [
    ({"metadata": {"name": "a"}, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
     ScrapeResult(Gauges(2.0, 3.0), datetime(2026, 1, 1, tzinfo=timezone.utc)), ("Running", True, False, 5.0, "")),
    ({"metadata": {"name": "a", "deletionTimestamp": "2026-01-01T00:00:00Z"},
      "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}},
     ScrapeResult(None, datetime(2026, 1, 1, tzinfo=timezone.utc), "HTTP 503"),
     ("Running", False, True, None, "HTTP 503")),
    ({"metadata": {"name": "a"}, "status": {"phase": "Pending"}}, None, ("Pending", False, False, None, "not scraped")),
    ({"metadata": {"name": "a"}}, None, ("Unknown", False, False, None, "not scraped")),
], ids=["running-ready", "deleting-unready", "pending-not-scraped", "no-status"])
def test_pod_sample(body, result, expected):
    sample = pod_sample(body, result)
    assert (sample.phase, sample.ready, sample.deleting, sample.load, sample.error) == expected


READY = [{"type": "Ready", "status": "True"}]


@pytest.mark.parametrize("metadata, status, serving", [
    ({"name": "a"}, {"phase": "Running", "conditions": READY}, True),
    ({"name": "a"}, {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}, False),
    ({"name": "a"}, {"phase": "Pending", "conditions": READY}, False),
    ({"name": "a", "deletionTimestamp": "2026-01-01T00:00:00Z"}, {"phase": "Running", "conditions": READY}, False),
], ids=["running-ready", "unready", "pending", "deleting"])
def test_is_serving_is_running_ready_and_not_deleting(metadata, status, serving):
    assert is_serving({"metadata": metadata, "status": status}) is serving


def test_parse_gauges_on_the_scoring_servers_own_metrics():
    """The contract with server/metrics.py: its text gives running and waiting."""
    from server.metrics import ServerMetrics
    from server.scheduler import Load

    metrics = ServerMetrics("qwen", 65536, lambda: Load(num_running=5, num_waiting=7, num_running_tokens=300,
                                                        num_waiting_tokens=400))
    assert parse_gauges(metrics.render().decode()) == (Gauges(5.0, 7.0), "")


def test_a_loading_servers_metrics_give_zero_load():
    """A server still loading its model (server/startup.py) answers true zeros: a sample of 0,
    not an error. The decision sets it aside anyway: it is not Ready until the model is in."""
    from server.config import ServerConfig
    from server.startup import EngineStartup

    startup = EngineStartup(ServerConfig(), load=lambda: None)  # never started: loading
    text = startup.metrics.render().decode()
    assert "scoringfleet_model_loading{" in text
    assert parse_gauges(text) == (Gauges(0.0, 0.0), "")
