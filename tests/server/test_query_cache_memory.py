"""The query cache's memory bound (issue 30): many distinct queries through one server (real HTTP,
a tiny random Llama) leave the cache within its token budget and the process's RSS flat once the
cache is full. A leak of every query would grow it by ~75 MB here (1,500 queries of 100 tokens at
~512 bytes of key/values a token), against a few MB of noise."""
from __future__ import annotations

import concurrent.futures
import random

import httpx
import pytest

from bench.server_process import free_port
from server.__main__ import build_engine, resolve_config
from server.config import ServerConfig
from tests.kit.servers import live_server

pytestmark = pytest.mark.slow

BUDGET = 4096         # tokens: ~40 queries of 100
QUERY_TOKENS = 100
NUM_WARM_UP = 500     # fills the cache many times over, and warms allocator and caches
NUM_MEASURED = 1500


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def send_distinct_queries(client: httpx.Client, rng: random.Random, count: int, vocab: int) -> None:
    bodies = [{"query": [rng.randrange(1, vocab) for _ in range(QUERY_TOKENS)],
               "items": [[rng.randrange(1, vocab)], [rng.randrange(1, vocab)]],
               "label_token_ids": [1, 2]} for _ in range(count)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for response in pool.map(lambda body: client.post("/v1/score", json=body), bodies):
            assert response.status_code == 200, response.text


def test_distinct_queries_leave_the_cache_within_its_budget_and_rss_flat(tiny_model_dir):
    config = resolve_config(ServerConfig(model_path=str(tiny_model_dir), dtype="float32",
                                         port=free_port(), query_cache_tokens=BUDGET))
    engine = build_engine(config)
    cache, vocab = engine.runner.query_cache, engine.runner.vocab_size
    rng = random.Random(30)
    with live_server(config, engine) as url, httpx.Client(base_url=url, timeout=30) as client:
        send_distinct_queries(client, rng, NUM_WARM_UP, vocab)
        assert cache.num_tokens <= BUDGET
        before = rss_bytes()
        send_distinct_queries(client, rng, NUM_MEASURED, vocab)
        after = rss_bytes()
        metrics = client.get("/metrics").text
    assert cache.num_held_tokens == 0 and BUDGET - QUERY_TOKENS < cache.num_tokens <= BUDGET
    assert engine.metrics.num_requests == NUM_WARM_UP + NUM_MEASURED
    print(f"\nRSS {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB after {NUM_MEASURED} distinct "
          f"queries; cache {cache.num_tokens} tokens in {len(cache)} queries (budget {BUDGET})")
    assert after - before < 16 * 2**20
    assert "sglang:cached_tokens_total" in metrics
