"""server/rerank.py, pure: a rerank's scoring request is /v1/score's of the template's expansion,
documents are truncated as asked, bad requests are 400s that name the field, and results come
back best first, top_n and return_documents honoured."""
from __future__ import annotations

import pytest

from server.errors import BadRequest
from server.inputs import InputLimits, prepare
from server.rerank import Reranker, choose_reranker, rerank_response, score_request, truncate
from server.rerank_schemas import RerankRequest
from server.rerank_templates import BUILTINS, YES_NO, parse_template
from server.schemas import ScoreRequest
from server.special_tokens import NO_SPECIAL_TOKENS, SpecialTokens

TEMPLATE = parse_template({"query": "Q:{query}|{instruction}|", "document": "D:{document}?", "yes": "y",
                           "no": "n", "instruction": "find"}, "test")
LIMITS = InputLimits(vocab_size=1000, max_context_tokens=64, max_sequence_tokens=1000,
                     max_items_per_request=4)
BOS = SpecialTokens(before=(999,), after=(998,))


def tokenize(text: str) -> list[int]:
    """Words and single characters: a cut inside a word still changes its tokens."""
    return [sum(map(ord, word)) % 900 for word in text.split(" ")] if text else []


RERANKER = Reranker.create(TEMPLATE, lambda text: [ord(ch) for ch in text])


def request(**fields) -> RerankRequest:
    return RerankRequest(**{"query": "capital", "documents": ["Paris", {"text": "Rome"}], **fields})


@pytest.mark.parametrize("special", [NO_SPECIAL_TOKENS, BOS], ids=["none", "bos-eos"])
def test_the_scoring_request_is_v1_score_of_the_expansion(special):
    body = request(instruction="be brief")
    scoring = score_request(RERANKER, body, tokenize, LIMITS, special)
    expansion = ScoreRequest(query="Q:capital|be brief|", items=["D:Paris?", "D:Rome?"],
                             label_token_ids=[ord("n"), ord("y")], apply_softmax=True)
    assert prepare(scoring, tokenize, LIMITS) == prepare(expansion, tokenize, LIMITS, special)
    assert scoring.label_token_ids == [ord("n"), ord("y")] and scoring.apply_softmax


def test_truncate_keeps_the_longest_head_within_the_budget():
    text = "one two three four five"
    assert truncate(text, 10, tokenize) == text
    assert truncate(text, 3, tokenize) == "one two three"  # a fourth word (even "f") is a token more
    assert truncate(text, 1, tokenize) == "one"


def test_max_tokens_per_doc_truncates_each_document():
    body = request(documents=["a b c d e", "f"], max_tokens_per_doc=2)
    scoring = score_request(RERANKER, body, tokenize, LIMITS, NO_SPECIAL_TOKENS)
    assert scoring.items == [tokenize("D:a b?"), tokenize("D:f?")]


@pytest.mark.parametrize("fields, message", [
    ({"query": "  "}, "query: must not be empty"),
    ({"documents": []}, "documents: must hold at least one document"),
    ({"documents": ["d"] * 5}, "documents: 5 exceed max_items_per_request=4"),
    ({"rank_fields": ["title"]}, r"rank_fields: only \['text'\] is ranked here, got \['title'\]"),
    ({"max_chunks_per_doc": 3}, "max_chunks_per_doc: documents are not chunked"),
    ({"relevant_spans": {"mode": "on"}}, "relevant_spans: not supported"),
    ({"query": "\ud800"}, "query is not valid Unicode"),
    ({"documents": ["ok", "\udfff"]}, r"documents\[1\] is not valid Unicode"),
    ({"documents": ["ok", " ".join(["w"] * 70)]},
     r"documents\[1\]: 71 tokens .* exceed the model's context length of 64; send max_tokens_per_doc"),
    ({"documents": ["ok", " ".join(["w"] * 70)], "max_tokens_per_doc": 64},
     r"documents\[1\]: 65 tokens .* even with max_tokens_per_doc=64"),
], ids=["empty-query", "no-documents", "too-many", "rank-fields", "chunks", "spans", "query-unicode",
        "document-unicode", "too-long", "too-long-truncated"])
def test_a_bad_rerank_is_a_400_naming_the_field(fields, message):
    with pytest.raises(BadRequest, match=message):
        score_request(RERANKER, request(**fields), tokenize, LIMITS, NO_SPECIAL_TOKENS)


def test_a_document_past_max_total_tokens_says_so():
    limits = InputLimits(vocab_size=1000, max_context_tokens=64, max_sequence_tokens=3,
                         max_items_per_request=4)
    message = r"documents\[0\]: 4 tokens .* exceed max_total_tokens=3, .*; send max_tokens_per_doc"
    with pytest.raises(BadRequest, match=message):
        score_request(RERANKER, request(documents=["a b c"]), tokenize, limits, NO_SPECIAL_TOKENS)


def test_results_are_best_first_ties_by_index():
    body = request(documents=["a", "b", "c", "d"])
    response = rerank_response(body, [0.2, 0.9, 0.2, 0.5], 40, "m", "2")
    assert [(r.index, r.relevance_score) for r in response.results] == [(1, 0.9), (3, 0.5), (0, 0.2),
                                                                          (2, 0.2)]
    assert [r.document.text for r in response.results] == ["b", "d", "a", "c"]
    assert response.model == "m" and response.id.startswith("rerank-")
    assert response.usage.total_tokens == response.meta.tokens.input_tokens == 40
    assert response.meta.api_version.version == "2"


@pytest.mark.parametrize("top_n, expected", [(None, [1, 0, 2]), (0, [1, 0, 2]), (2, [1, 0]),
                                             (9, [1, 0, 2])])
def test_top_n_keeps_the_best(top_n, expected):
    response = rerank_response(request(documents=["a", "b", "c"], top_n=top_n), [0.5, 0.7, 0.1], 9, "m", "1")
    assert [r.index for r in response.results] == expected


def test_return_documents_false_leaves_them_out():
    response = rerank_response(request(return_documents=False), [0.1, 0.3], 9, "m", "1")
    assert [r.document for r in response.results] == [None, None]


def test_choose_reranker_checks_the_labels_of_the_chosen_template():
    def word_tokenize(text):
        return [len(text)]  # every text one token: labels always fit
    assert choose_reranker(None, ["default"], word_tokenize).template == BUILTINS[YES_NO]
    with pytest.raises(ValueError, match="the 'no' label ' no' is 3 tokens"):
        choose_reranker("yes-no", [], lambda text: [ord(ch) for ch in text])
