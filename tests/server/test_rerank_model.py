"""Rerank on the real default model (SmolLM2-135M-Instruct GGUF, float32, the automatic yes-no
template), called by the Cohere SDK, directly and through `python -m gateway`: each relevance score
equals /v1/score of the template's expansion (apply_softmax over [no, yes], the "yes" share) and a
plain transformers forward over the same token ids, within 1e-5. The model loads once (~16 s)."""
from __future__ import annotations

from types import SimpleNamespace

import cohere
import httpx
import pytest
import torch

from bench.server_process import free_port
from server.__main__ import build_engine, build_reranker, resolve_config
from server.config import ServerConfig
from server.rerank_templates import YES_NO
from tests.gateway.support import gateway_process, sample
from tests.kit.servers import live_server
from tests.kit.waiting import wait_for

pytestmark = pytest.mark.slow

TOLERANCE = 1e-5
KEY = "model-key"
QUERY = "What is the capital of France?"
DOCUMENTS = ["Paris is the capital and largest city of France.", "Bananas are yellow.",
             "Berlin is the capital of Germany.", "France's capital city is Paris, on the Seine."]


@pytest.fixture(scope="module")
def real():
    config = resolve_config(ServerConfig(dtype="float32", port=free_port(), request_timeout_s=120,
                                         api_key=KEY, served_model_name="SmolLM2"))
    engine = build_engine(config)
    reranker = build_reranker(config, engine.runner)
    with live_server(config, engine, reranker) as url:
        yield SimpleNamespace(url=url, reranker=reranker, runner=engine.runner)


def v1_score_of_expansion(real) -> list[float]:
    template = real.reranker.template
    body = {"query": template.fill_query(QUERY), "items": [template.fill_document(d) for d in DOCUMENTS],
            "label_token_ids": [real.reranker.no_id, real.reranker.yes_id], "apply_softmax": True}
    response = httpx.post(f"{real.url}/v1/score", json=body, headers={"Authorization": f"Bearer {KEY}"},
                          timeout=120)
    assert response.status_code == 200, response.text
    return [row[1] for row in response.json()["scores"]]


@torch.inference_mode()
def plain_forward(real, document: str) -> float:
    """The unshared computation: the expansion's ids whole, no cache, softmax over [no, yes]."""
    template, runner = real.reranker.template, real.runner
    ids = (list(runner.special_tokens.before) + runner.tokenize(template.fill_query(QUERY))
           + runner.tokenize(template.fill_document(document)) + list(runner.special_tokens.after))
    logits = runner.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    return torch.softmax(logits[[real.reranker.no_id, real.reranker.yes_id]], dim=-1)[1].item()


def test_the_default_model_gets_the_yes_no_template(real):
    assert real.reranker.template.name == YES_NO
    info = httpx.get(f"{real.url}/get_server_info").json()["rerank_template"]
    assert info["name"] == YES_NO and info["yes_token_id"] == real.reranker.yes_id


def test_cohere_rerank_scores_are_the_expansion_scored(real):
    response = cohere.ClientV2(base_url=real.url, api_key=KEY, timeout=120).rerank(
        model="SmolLM2", query=QUERY, documents=DOCUMENTS)
    served = {r.index: r.relevance_score for r in response.results}
    expected = v1_score_of_expansion(real)
    reference = [plain_forward(real, document) for document in DOCUMENTS]
    for index in range(len(DOCUMENTS)):
        assert served[index] == pytest.approx(expected[index], abs=TOLERANCE)
        assert served[index] == pytest.approx(reference[index], abs=TOLERANCE)
    assert [r.relevance_score for r in response.results] == sorted(served.values(), reverse=True)
    print(f"\nrelevance by document: {[round(served[i], 4) for i in range(len(DOCUMENTS))]}")


def test_cohere_rerank_through_the_gateway(real, tmp_path):
    direct = cohere.Client(base_url=real.url, api_key=KEY, timeout=120).rerank(
        query=QUERY, documents=DOCUMENTS, top_n=2, return_documents=True)
    with gateway_process("--worker-urls", real.url, "--api-key", KEY, log_path=tmp_path / "gw.log") as gateway:
        wait_for(lambda: sample(gateway, "scoringfleet_gateway_workers", state="ready") == 1)
        through = cohere.Client(base_url=gateway, api_key=KEY, timeout=120).rerank(
            query=QUERY, documents=DOCUMENTS, top_n=2, return_documents=True)
    assert [(r.index, r.document.text) for r in through.results] == \
        [(r.index, DOCUMENTS[r.index]) for r in direct.results]
    for mine, theirs in zip(through.results, direct.results):
        assert mine.relevance_score == pytest.approx(theirs.relevance_score, abs=TOLERANCE)
