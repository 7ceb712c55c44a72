"""/v1/rerank and /v2/rerank through real HTTP, called by the real Cohere SDK (v1 and v2 clients).

The shape is the point here, so the engine runs a FakeRunner (scores a function of the tokens; its
tokenizer one token per character, hence the one-character labels). Scores against a real model:
test_rerank_model.py.
"""
from __future__ import annotations

import cohere
import httpx
import pytest

from server.rerank import Reranker
from server.rerank_templates import parse_template
from tests.kit.runners import FakeRunner
from tests.kit.servers import serving

TEMPLATE = parse_template({"query": "Q:{query} I:{instruction}\n", "document": "D:{document}\nA:",
                           "yes": "y", "no": "n", "instruction": "rank"}, "one-char-labels")
QUERY = "capital of France"
DOCUMENTS = ["Paris is the capital", "Berlin", "Rome is in Italy", "Paris", "Lyon"]
KEY = "rerank-key"


@pytest.fixture(scope="module")
def server():
    runner = FakeRunner()
    with serving(runner, Reranker.create(TEMPLATE, runner.tokenize), api_key=KEY,
                 max_items_per_request=8, served_model_name=("any", "m")) as (url, engine):
        yield url, engine


def expected_relevance(url: str) -> list[float]:
    """/v1/score of the template's expansion, apply_softmax over [no, yes]: the "yes" column."""
    body = {"query": TEMPLATE.fill_query(QUERY), "items": [TEMPLATE.fill_document(d) for d in DOCUMENTS],
            "label_token_ids": [ord("n"), ord("y")], "apply_softmax": True}
    response = httpx.post(f"{url}/v1/score", json=body, headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 200, response.text
    return [row[1] for row in response.json()["scores"]]


def test_cohere_v2_client_gets_results_best_first(server):
    url, _ = server
    client = cohere.ClientV2(base_url=url, api_key=KEY)
    response = client.rerank(model="any", query=QUERY, documents=DOCUMENTS)
    relevance = expected_relevance(url)
    assert [r.index for r in response.results] == sorted(range(5), key=lambda i: (-relevance[i], i))
    assert {r.index: r.relevance_score for r in response.results} == dict(enumerate(relevance))
    assert len(set(relevance)) > 1  # the order is not an accident of equal scores
    assert response.id.startswith("rerank-") and response.meta.api_version.version == "2"
    assert response.meta.tokens.input_tokens > 0


def test_cohere_v2_client_top_n(server):
    url, _ = server
    response = cohere.ClientV2(base_url=url, api_key=KEY).rerank(
        model="any", query=QUERY, documents=DOCUMENTS, top_n=2)
    full = cohere.ClientV2(base_url=url, api_key=KEY).rerank(model="any", query=QUERY, documents=DOCUMENTS)
    assert [r.index for r in response.results] == [r.index for r in full.results[:2]]


@pytest.mark.parametrize("return_documents", [True, False])
def test_cohere_v1_client_return_documents(server, return_documents):
    url, _ = server
    client = cohere.Client(base_url=url, api_key=KEY)
    documents = [{"text": d} for d in DOCUMENTS[:3]] + DOCUMENTS[3:]
    response = client.rerank(query=QUERY, documents=documents, top_n=3, return_documents=return_documents)
    assert len(response.results) == 3 and response.meta.api_version.version == "1"
    texts = [r.document.text if r.document else None for r in response.results]
    assert texts == ([DOCUMENTS[r.index] for r in response.results] if return_documents else [None] * 3)


def test_a_wrong_api_key_is_refused(server):
    url, _ = server
    with pytest.raises(cohere.UnauthorizedError):
        cohere.ClientV2(base_url=url, api_key="wrong").rerank(model="m", query=QUERY, documents=DOCUMENTS)
    with pytest.raises(cohere.UnauthorizedError):
        cohere.Client(base_url=url, api_key="wrong").rerank(query=QUERY, documents=DOCUMENTS)


@pytest.mark.parametrize("body, message", [
    ({"query": "q", "documents": []}, "documents: must hold at least one document"),
    ({"query": "", "documents": ["d"]}, "query: must not be empty"),
    ({"query": "q", "documents": ["d"] * 9}, "documents: 9 exceed max_items_per_request=8"),
    ({"query": "q", "documents": ["x" * 600]}, "documents[0]: 6"),
    ({"query": "q", "documents": ["d"], "top_n": -1}, "body.top_n: Input should be greater than or equal to 0"),
    ({"query": "q", "documents": [3]}, "body.documents.0"),
    ({"documents": ["d"]}, "body.query: Field required"),
], ids=["no-documents", "empty-query", "too-many", "too-long", "negative-top-n", "not-text", "no-query"])
def test_a_bad_rerank_is_a_400_naming_the_field(server, body, message):
    url, _ = server
    response = httpx.post(f"{url}/v2/rerank", json=body, headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 400
    error = response.json()
    assert error["object"] == "error" and error["type"] == "BadRequestError" and message in error["message"]


def test_a_rerank_counts_its_documents_as_items(server):
    url, engine = server
    before = (engine.metrics.num_requests, engine.metrics.num_items)
    cohere.ClientV2(base_url=url, api_key=KEY).rerank(model="m", query=QUERY, documents=DOCUMENTS)
    assert (engine.metrics.num_requests, engine.metrics.num_items) == (before[0] + 1, before[1] + 5)


def test_server_info_shows_the_effective_template(server):
    url, _ = server
    info = httpx.get(f"{url}/get_server_info").json()["rerank_template"]
    assert info == {**TEMPLATE.to_dict(), "no_token_id": ord("n"), "yes_token_id": ord("y")}


def test_without_a_reranker_there_is_no_rerank_route():
    with serving(FakeRunner()) as (url, _):
        assert httpx.post(f"{url}/v1/rerank", json={"query": "q", "documents": ["d"]}).status_code == 404
        assert httpx.get(f"{url}/get_server_info").json()["rerank_template"] is None
