"""Sequence classifiers served over real HTTP: tiny random cross-encoders (XLM-RoBERTa, BERT) and
decoder seq-cls models (Qwen3, Llama), each reranking through the Cohere SDK (v1 and v2 clients),
TEI's /rerank and vLLM's /score shapes, every score equal to transformers' logits after the
checkpoint's activation (float32, within 1e-5); /classify on a 3-label classifier; and the 400
that names the routes a model serves when it is asked for another."""
from __future__ import annotations

from types import SimpleNamespace

import cohere
import httpx
import pytest
import torch
from transformers import AutoTokenizer

from bench.classifier_models import build_classifier
from bench.server_process import free_port
from server.__main__ import build_reranker, build_runner
from server.config import ServerConfig
from server.engine import Engine
from tests.gateway.support import gateway_process, sample
from tests.kit.runners import FakeRunner
from tests.kit.servers import live_server, serving
from tests.kit.waiting import wait_for

TOLERANCE = 1e-5
KEY = "classifier-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
QUERY = "What is the capital of California?"
DOCUMENTS = ["Sacramento", "San Jose San Francisco Los Angeles", "The quick brown fox jumps", "apple banana",
             "Yes No"]
LABELS = ["negative", "neutral", "positive"]


@pytest.fixture(scope="module", params=["xlm-roberta", "bert", "qwen3", "llama"])
def served(request, tmp_path_factory):
    with serve_classifier(tmp_path_factory.mktemp(request.param), request.param) as server:
        yield server


def serve_classifier(folder, family: str, **build):
    """A live server over the real loader and runner for a tiny classifier of `family`."""
    build_classifier(folder, family, **build)
    config = ServerConfig(model_path=str(folder), port=free_port(), api_key=KEY, served_model_name="tiny",
                          max_items_per_request=16).resolve("cpu", "float32")
    runner = build_runner(config)
    head = build_reranker(config, runner)
    server = live_server(config, Engine(config, runner), head)

    class Served:
        def __enter__(self):
            url = server.__enter__()
            return SimpleNamespace(url=url, folder=folder, runner=runner, family=family)

        def __exit__(self, *exc):
            return server.__exit__(*exc)
    return Served()


@torch.inference_mode()
def expected(served, query: str, documents: list[str], raw: bool = False) -> list[float]:
    """transformers alone: the tokenizer's pair encoding, one forward per pair, the activation."""
    tokenizer = AutoTokenizer.from_pretrained(served.folder)
    scores = []
    for document in documents:
        logit = served.runner.model(**tokenizer(query, document, return_tensors="pt")).logits[0, 0].float()
        scores.append(logit.item() if raw else torch.sigmoid(logit).item())
    return scores


def post(served, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{served.url}{path}", json=body, headers=AUTH, timeout=60)


def test_cohere_v2_rerank_scores_are_the_logits_after_sigmoid(served):
    response = cohere.ClientV2(base_url=served.url, api_key=KEY, timeout=60).rerank(
        model="tiny", query=QUERY, documents=DOCUMENTS)
    by_index = {r.index: r.relevance_score for r in response.results}
    assert [by_index[i] for i in range(len(DOCUMENTS))] == pytest.approx(expected(served, QUERY, DOCUMENTS),
                                                                         abs=TOLERANCE)
    assert [r.relevance_score for r in response.results] == sorted(by_index.values(), reverse=True)


def test_cohere_v1_rerank_top_n_and_documents(served):
    response = cohere.Client(base_url=served.url, api_key=KEY, timeout=60).rerank(
        query=QUERY, documents=DOCUMENTS, top_n=2, return_documents=True)
    scores = expected(served, QUERY, DOCUMENTS)
    best = sorted(range(len(DOCUMENTS)), key=lambda i: -scores[i])[:2]
    assert [(r.index, r.document.text) for r in response.results] == [(i, DOCUMENTS[i]) for i in best]


@pytest.mark.parametrize("raw", [False, True])
def test_tei_rerank(served, raw):
    response = post(served, "/rerank", {"query": QUERY, "texts": DOCUMENTS, "raw_scores": raw, "return_text": True})
    assert response.status_code == 200, response.text
    ranks = response.json()
    scores = expected(served, QUERY, DOCUMENTS, raw=raw)
    assert [rank["index"] for rank in ranks] == sorted(range(len(DOCUMENTS)), key=lambda i: -scores[i])
    for rank in ranks:
        assert rank["score"] == pytest.approx(scores[rank["index"]], abs=TOLERANCE)
        assert rank["text"] == DOCUMENTS[rank["index"]]


def test_tei_rerank_truncates_only_when_asked(served):
    long_text = "apple banana fruit car red fast " * 60
    refused = post(served, "/rerank", {"query": QUERY, "texts": [long_text]})
    assert refused.status_code == 400, refused.text
    assert refused.json()["message"].startswith("texts[0]: ") and "context length" in refused.json()["message"]
    cut = post(served, "/rerank", {"query": QUERY, "texts": [long_text], "truncate": True})
    assert cut.status_code == 200, cut.text


@pytest.mark.parametrize("path", ["/v1/score", "/score"])
@pytest.mark.parametrize("shape", [("text_1", "text_2"), ("queries", "documents")])
def test_vllm_score_one_to_many(served, path, shape):
    response = post(served, path, {shape[0]: QUERY, shape[1]: DOCUMENTS, "model": "tiny"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["object"], body["model"]) == ("list", "tiny") and body["id"].startswith("score-")
    assert [item["index"] for item in body["data"]] == list(range(len(DOCUMENTS)))
    assert [item["score"] for item in body["data"]] == pytest.approx(expected(served, QUERY, DOCUMENTS),
                                                                     abs=TOLERANCE)
    assert body["usage"]["prompt_tokens"] > 0


def test_vllm_score_pairs_zipped(served):
    queries = [QUERY, "Is this a fruit?", QUERY]
    response = post(served, "/v1/score", {"text_1": queries, "text_2": DOCUMENTS[:3]})
    assert response.status_code == 200, response.text
    want = [expected(served, q, [d])[0] for q, d in zip(queries, DOCUMENTS[:3])]
    assert [item["score"] for item in response.json()["data"]] == pytest.approx(want, abs=TOLERANCE)


@pytest.mark.parametrize("body, says", [
    ({"text_1": ["a", "b"], "text_2": ["c", "d", "e"]}, "1:1, 1:N or N:N"),
    ({"text_1": "a"}, "text_1 and text_2"),
    ({"query": "q", "items": ["d"], "label_token_ids": [0]}, "/v1/rerank"),
])
def test_a_bad_or_foreign_score_body_is_a_400_that_says_what(served, body, says):
    response = post(served, "/v1/score", body)
    assert response.status_code == 400 and says in response.json()["message"], response.text


def test_server_info_names_the_head_and_routes(served):
    info = httpx.get(f"{served.url}/get_server_info").json()
    assert info["classifier"]["labels"] == ["LABEL_0"] and info["rerank_template"] is None
    assert "/rerank" in info["routes"]


@pytest.mark.parametrize("family", ["bert", "qwen3"])
def test_classify_a_three_label_classifier(tmp_path, family):
    with serve_classifier(tmp_path, family, num_labels=3, labels=LABELS) as served:
        texts = ["I love this", "Sacramento is the capital", "terrible"]
        response = post(served, "/classify", {"input": texts, "model": "tiny"})
        assert response.status_code == 200, response.text
        data = response.json()["data"]
        tokenizer = AutoTokenizer.from_pretrained(served.folder)
        for index, (row, text) in enumerate(zip(data, texts)):
            with torch.inference_mode():
                logits = served.runner.model(**tokenizer(text, return_tensors="pt")).logits[0].float()
            probs = torch.softmax(logits, dim=-1).tolist()
            assert (row["index"], row["num_classes"]) == (index, 3)
            assert sum(row["probs"]) == pytest.approx(1.0, abs=1e-6)
            assert row["probs"] == pytest.approx(probs, abs=TOLERANCE)
            assert row["label"] == LABELS[max(range(3), key=probs.__getitem__)]
        one = post(served, "/v1/classify", {"input": texts[0]}).json()["data"]
        assert len(one) == 1 and one[0]["probs"] == pytest.approx(data[0]["probs"], abs=TOLERANCE)
        refused = post(served, "/v1/rerank", {"query": QUERY, "documents": DOCUMENTS})
        assert refused.status_code == 400 and "it serves /classify" in refused.json()["message"]


@pytest.mark.parametrize("path, body", [
    ("/classify", {"input": "a text"}),
    ("/rerank", {"query": "q", "texts": ["d"]}),
    ("/score", {"text_1": "q", "text_2": ["d"]}),
    ("/v1/score", {"queries": "q", "documents": ["d"]}),
])
def test_a_causal_lm_refuses_the_classifier_routes_naming_its_own(path, body):
    with serving(FakeRunner(), api_key=KEY) as (url, _):
        response = httpx.post(f"{url}{path}", json=body, headers=AUTH)
    assert response.status_code == 400, response.text
    message = response.json()["message"]
    assert message.startswith(path) and "is not served for this model (a causal LM)" in message
    assert "it serves /v1/score (SGLang's shape" in message


def test_the_gateway_routes_the_classifier_routes(served, tmp_path):
    """Through `python -m gateway`: TEI's /rerank, vLLM's /score shapes and /classify answer as the
    worker does (the gateway forwards the body unchanged to the same path)."""
    if served.family != "xlm-roberta":
        pytest.skip("one family is enough for the routing")
    bodies = [("/rerank", {"query": QUERY, "texts": DOCUMENTS}),
              ("/score", {"text_1": QUERY, "text_2": DOCUMENTS}),
              ("/v1/score", {"queries": QUERY, "documents": DOCUMENTS}),
              ("/classify", {"input": DOCUMENTS})]
    with gateway_process("--worker-urls", served.url, "--api-key", KEY, log_path=tmp_path / "gw.log") as gateway:
        wait_for(lambda: sample(gateway, "scoringfleet_gateway_workers", state="ready") == 1)
        through = [httpx.post(f"{gateway}{path}", json=body, headers=AUTH, timeout=60) for path, body in bodies]
    for (path, body), response in zip(bodies, through):
        assert response.status_code == 200, (path, response.text)
        direct = post(served, path, body).json()
        mine, theirs = response.json(), direct
        if isinstance(mine, dict):
            mine, theirs = mine["data"], theirs["data"]
        assert [{k: v for k, v in row.items() if k != "score"} for row in mine] == \
               [{k: v for k, v in row.items() if k != "score"} for row in theirs]
        assert [row.get("score") for row in mine] == pytest.approx([row.get("score") for row in theirs], abs=1e-6)
