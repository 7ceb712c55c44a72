"""`python -m gateway` over two real servers of one tiny Llama, one of them with a LoRA adapter
(`--lora-paths sql=...`, loaded by the server's own start): the gateway learns the adapter from that
server's /v1/models and sends the adapter's requests there, in both of its names (`sql`,
`tiny:sql`); the base model's go to either; an adapter no server has is a worker's 404, passed on."""
from __future__ import annotations

import contextlib

import httpx
import pytest
import torch

from bench.lora_models import save_adapter
from bench.server_process import free_port
from server.__main__ import load
from server.config import ServerConfig
from server.engine import Engine
from server.model_loader import load_model
from tests.gateway.support import gateway_process, sample
from tests.kit.models import build_tiny_model
from tests.kit.servers import live_server
from tests.kit.waiting import wait_for

G = "scoringfleet_gateway"
BODY = {"query": "Is this SQL? Answer yes or no:", "items": ["SELECT 1", "hello"], "label_token_ids": [5, 17]}


@contextlib.contextmanager
def tiny_server(model_dir, *lora_paths: str):
    config, runner, reranker = load(ServerConfig(model_path=str(model_dir), dtype="float32", port=free_port(),
                                                 served_model_name=("tiny",), lora_paths=lora_paths))
    with live_server(config, Engine(config, runner), reranker) as url:
        yield url


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lora-fleet")
    model_dir = build_tiny_model(folder / "tiny")
    base, _ = load_model(str(model_dir), torch.device("cpu"), torch.float32)
    adapter = save_adapter(base, folder / "sql", seed=1)
    with tiny_server(model_dir, f"sql={adapter}") as with_sql, tiny_server(model_dir) as plain, \
            gateway_process("--worker-urls", with_sql, plain, log_path=folder / "gateway.log") as gateway:
        wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 2)
        wait_for(lambda: {m["id"] for m in httpx.get(f"{gateway}/v1/models").json()["data"]} == {"tiny", "sql"})
        yield gateway, with_sql, plain


def test_an_adapters_requests_go_to_the_server_that_has_it(fleet):
    gateway, with_sql, plain = fleet
    before = {url: sample(gateway, f"{G}_routed_total", worker=url) for url in (with_sql, plain)}
    with httpx.Client(base_url=gateway, timeout=30) as client:
        answers = [client.post("/v1/score", json={**BODY, "model": model}) for model in ["sql", "tiny:sql"] * 3]
    assert [a.status_code for a in answers] == [200] * 6, answers[-1].text
    assert sample(gateway, f"{G}_routed_total", worker=with_sql) - before[with_sql] == 6
    assert sample(gateway, f"{G}_routed_total", worker=plain) == before[plain]
    # the adapter's scores, not the base model's (the adapter's weights are random, not zero)
    base = httpx.post(f"{gateway}/v1/score", json={**BODY, "model": "tiny"}, timeout=30).json()["scores"]
    assert answers[0].json()["scores"] == answers[1].json()["scores"] != base


def test_an_adapter_no_server_has_is_the_workers_404(fleet):
    gateway, _, _ = fleet
    answer = httpx.post(f"{gateway}/v1/score", json={**BODY, "model": "tiny:chat"}, timeout=30)
    # no server lists it: any server of the fleet judges it (the base model is served), and says why
    assert answer.status_code == 404, answer.text
    assert answer.json()["param"] is None and "'tiny:chat' is not served here" in answer.json()["message"]
