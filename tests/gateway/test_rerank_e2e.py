"""/v1/rerank and /v2/rerank through `python -m gateway`, called by the real Cohere SDK: routed
like /v1/score to real server processes (bench.paced_server over a runner that costs nothing, a
template whose labels are one character each), weighed by their documents, the API key checked at
the door and the gateway's own key sent on; a worker that is gone is retried elsewhere."""
from __future__ import annotations

import contextlib
import json
import os

import cohere
import pytest

from bench.server_process import stop
from gateway.config import API_KEY_ENV
from tests.gateway.support import gateway_process, sample, start_worker
from tests.kit.waiting import wait_for, wait_http

G = "scoringfleet_gateway"
KEY = "rerank-fleet-key"
TEMPLATE = {"query": "Q:{query}\n", "document": "D:{document}\nA:", "yes": "y", "no": "n"}
DOCUMENTS = ["alpha", "beta", "gamma", "delta"]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Two workers and a gateway, all with the key from the env var; yields (gateway, workers, stop
    a worker)."""
    folder = tmp_path_factory.mktemp("rerank-fleet")
    template = folder / "template.json"
    template.write_text(json.dumps(TEMPLATE))
    env = {**os.environ, API_KEY_ENV: KEY}
    with contextlib.ExitStack() as stack:
        processes, urls = [], []
        for i in range(2):
            # served as "m", the model the Cohere calls name (an unserved model is a 404)
            process, url = start_worker(0.0, "127.0.0.1", None, folder / f"worker{i}.log",
                                        "--rerank-template", str(template), "--served-model-name", "m", env=env)
            stack.callback(stop, process)
            wait_http(f"{url}/health_generate", timeout_s=60, process=process)
            processes.append(process)
            urls.append(url)
        gateway = stack.enter_context(gateway_process("--worker-urls", *urls, log_path=folder / "gw.log",
                                                      env=env))
        wait_for(lambda: sample(gateway, f"{G}_workers", state="ready") == 2)
        yield gateway, urls, processes


def test_cohere_clients_rerank_through_the_gateway(fleet):
    gateway, workers, _ = fleet
    through = cohere.ClientV2(base_url=gateway, api_key=KEY).rerank(model="m", query="q", documents=DOCUMENTS,
                                                                    top_n=3)
    direct = cohere.ClientV2(base_url=workers[0], api_key=KEY).rerank(model="m", query="q", documents=DOCUMENTS,
                                                                      top_n=3)
    assert [(r.index, r.relevance_score) for r in through.results] == \
        [(r.index, r.relevance_score) for r in direct.results]
    assert len(through.results) == 3 and through.meta.api_version.version == "2"
    v1 = cohere.Client(base_url=gateway, api_key=KEY).rerank(query="q", documents=DOCUMENTS,
                                                             return_documents=True)
    assert [r.document.text for r in v1.results] == [DOCUMENTS[r.index] for r in v1.results]
    assert v1.meta.api_version.version == "1"


def test_a_wrong_key_is_the_gateways_401(fleet):
    gateway, _, _ = fleet
    before = sample(gateway, f"{G}_requests_total", code="401")
    with pytest.raises(cohere.UnauthorizedError) as refused:
        cohere.ClientV2(base_url=gateway, api_key="wrong").rerank(model="m", query="q", documents=DOCUMENTS)
    assert refused.value.body["param"] == "gateway"
    assert sample(gateway, f"{G}_requests_total", code="401") == before + 1


def test_a_bad_rerank_gets_the_workers_400(fleet):
    gateway, _, _ = fleet
    with pytest.raises(cohere.BadRequestError) as refused:
        cohere.ClientV2(base_url=gateway, api_key=KEY).rerank(model="m", query="q", documents=[])
    assert "documents: must hold at least one document" in refused.value.body["message"]


def test_a_worker_gone_is_retried_on_the_other(fleet):
    gateway, workers, processes = fleet
    stop(processes[1])  # refused from now on: the gateway moves on without using up the retry
    for _ in range(4):
        response = cohere.ClientV2(base_url=gateway, api_key=KEY).rerank(model="m", query="q",
                                                                         documents=DOCUMENTS)
        assert len(response.results) == 4
    assert sample(gateway, f"{G}_routed_total", worker=workers[0]) >= 4
