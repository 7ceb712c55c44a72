"""A live server's /metrics read the way an Inference Gateway's Endpoint Picker reads an SGLang pod
(llm-d's core-metrics-extractor, engine type "sglang"): sglang:num_queue_reqs, sglang:num_running_reqs,
sglang:token_usage, and sglang:cache_config_info's page_size and num_pages labels, by name. True while
forward passes are held (load) and after SIGTERM (draining: the EPP sees the admitted work, not 0).

The server is tests/server/gated_server.py (the real serving path; forwards wait until stdin closes).
"""
from __future__ import annotations

import signal

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.kit.servers import wait_ready
from tests.kit.waiting import wait_for
from tests.server.test_drain import NUM_ITEMS, admit, start_gated, wait_not_ready

MAX_RUNNING = 2
MAX_TOTAL_TOKENS = 4096
# The EPP's SGLang mapping (llm-d-router, pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go)
QUEUE, RUNNING, KV_USAGE, CACHE_INFO = ("sglang:num_queue_reqs", "sglang:num_running_reqs",
                                        "sglang:token_usage", "sglang:cache_config_info")
BLOCK_SIZE_LABEL, NUM_BLOCKS_LABEL = "page_size", "num_pages"


def epp_read(text: str) -> dict[str, float]:
    """What the EPP takes from one scrape: each gauge's value by its metric name (one series per
    pod), and the cache size from the info gauge's labels, as integers. A missing metric is an
    error to the EPP (the pod's metrics go stale): KeyError here."""
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in (QUEUE, RUNNING, KV_USAGE, CACHE_INFO):
        assert families[name].type == "gauge", name
        assert len(families[name].samples) == 1, f"{name}: one series per pod"
    [info] = families[CACHE_INFO].samples
    return {"queue": families[QUEUE].samples[0].value, "running": families[RUNNING].samples[0].value,
            "kv_usage": families[KV_USAGE].samples[0].value,
            "block_size": int(info.labels[BLOCK_SIZE_LABEL]), "num_blocks": int(info.labels[NUM_BLOCKS_LABEL])}


def scrape(url: str) -> dict[str, float]:
    return epp_read(httpx.get(f"{url}/metrics", timeout=5).text)


def used_tokens(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "sglang:num_used_tokens")


def test_the_pickers_four_signals_are_true_under_load_and_while_draining(tmp_path):
    server = start_gated(tmp_path / "server.log", "--max-running-requests", str(MAX_RUNNING),
                         "--max-total-tokens", str(MAX_TOTAL_TOKENS), "--request-timeout", "60")
    try:
        wait_ready(server.process, server.url)
        idle = scrape(server.url)
        assert idle == {"queue": 0, "running": 0, "kv_usage": 0, "block_size": 1, "num_blocks": MAX_TOTAL_TOKENS}

        threads, outcomes = admit(server.url, 3)  # 12 sequences: 2 in the held forward, 10 waiting
        wait_for(lambda: scrape(server.url)["running"] == MAX_RUNNING, timeout_s=10)
        busy = scrape(server.url)
        assert (busy["running"], busy["queue"]) == (MAX_RUNNING, 3 * NUM_ITEMS - MAX_RUNNING)
        assert busy["kv_usage"] == pytest.approx(used_tokens(server.url) / MAX_TOTAL_TOKENS) and busy["kv_usage"] > 0
        assert busy["block_size"] * busy["num_blocks"] == MAX_TOTAL_TOKENS  # the capacity the EPP computes

        server.process.send_signal(signal.SIGTERM)
        wait_not_ready(server.url)  # readiness 503: endpoints and the InferencePool's EPP drop the pod
        draining = scrape(server.url)
        assert draining == busy  # the admitted work is still there, reported truly

        server.process.stdin.close()  # the forwards run; the drain ends once nothing is left
        for thread in threads:
            thread.join(timeout=30)
        assert [o.status_code for o in outcomes] == [200, 200, 200]
        assert server.process.wait(timeout=30) == 0
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(timeout=10)
