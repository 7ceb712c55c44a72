"""Rerank on the scoring path: a RerankRequest -> one ScoreRequest -> a RerankResponse. Pure.

The template's filled `query` is the shared head (computed once per rerank, as a /v1/score query
is), each filled `document` an item, the labels [no, yes] with apply_softmax: a document's relevance
is the "yes" share. The ScoreRequest carries token ids built exactly as /v1/score builds them from
text (inputs.py: each part tokenized alone, the tokenizer's special tokens once around the joined
ids), so a relevance score equals /v1/score of the template's expansion; token ids let a document
be truncated (max_tokens_per_doc) and a length error name the document.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable

from server.errors import BadRequest
from server.inputs import InputLimits, check_encodable, check_length
from server.rerank_schemas import (
    ApiVersion,
    DocumentOut,
    MetaTokens,
    RerankMeta,
    RerankRequest,
    RerankResponse,
    RerankResult,
    RerankUsage,
)
from server.rerank_templates import RerankTemplate, auto_template_name, label_ids, load_template
from server.schemas import ScoreRequest
from server.special_tokens import SpecialTokens

Tokenize = Callable[[str], list[int]]


@dataclass(frozen=True)
class Reranker:
    """A template whose labels are known to be one token each for this server's tokenizer."""

    template: RerankTemplate
    no_id: int
    yes_id: int

    @classmethod
    def create(cls, template: RerankTemplate, tokenize: Tokenize) -> Reranker:
        """ValueError (with the why) unless yes and no are single, distinct tokens."""
        return cls(template, *label_ids(template, tokenize))

    def to_dict(self) -> dict:
        return {**self.template.to_dict(), "no_token_id": self.no_id, "yes_token_id": self.yes_id}

    def rerank_request(self, body: RerankRequest, tokenize: Tokenize, limits: InputLimits,
                       special: SpecialTokens) -> ScoreRequest:
        return score_request(self, body, tokenize, limits, special)

    def relevance(self, row: list[float]) -> float:
        """The "yes" share of [no, yes]."""
        return row[1]


def choose_reranker(flag: str | None, model_names: list[str | None], tokenize: Tokenize) -> Reranker:
    """--rerank-template NAME|FILE, or the one the model's names call for; ValueError if unusable."""
    return Reranker.create(load_template(flag or auto_template_name(*model_names)), tokenize)


def texts_of(body: RerankRequest) -> list[str]:
    return [doc if isinstance(doc, str) else doc.text for doc in body.documents]


def score_request(reranker: Reranker, body: RerankRequest, tokenize: Tokenize, limits: InputLimits,
                  special: SpecialTokens) -> ScoreRequest:
    """The scoring request of a rerank, or BadRequest naming the field that is wrong."""
    check_request(body, limits)
    template = reranker.template
    head = special.before + tuple(tokenize(template.fill_query(body.query, body.instruction)))
    hint = (f" even with max_tokens_per_doc={body.max_tokens_per_doc}" if body.max_tokens_per_doc
            else "; send max_tokens_per_doc to truncate documents")
    items = []
    for index, text in enumerate(texts_of(body)):
        if body.max_tokens_per_doc is not None:
            text = truncate(text, body.max_tokens_per_doc, tokenize)
        own = tuple(tokenize(template.fill_document(text))) + special.after
        check_length(f"documents[{index}]", len(head) + len(own), limits, " (template, query and document)", hint)
        items.append(list(own))
    return ScoreRequest(query=list(head), items=items, apply_softmax=True, model=body.model,
                        label_token_ids=[reranker.no_id, reranker.yes_id])


def check_request(body: RerankRequest, limits: InputLimits) -> None:
    if not body.query.strip():
        raise BadRequest("query: must not be empty")
    if not body.documents:
        raise BadRequest("documents: must hold at least one document")
    if len(body.documents) > limits.max_items_per_request:
        raise BadRequest(f"documents: {len(body.documents)} exceed max_items_per_request="
                         f"{limits.max_items_per_request}")
    if body.rank_fields is not None and body.rank_fields != ["text"]:
        raise BadRequest(f"rank_fields: only ['text'] is ranked here, got {body.rank_fields}")
    if body.max_chunks_per_doc is not None:
        raise BadRequest("max_chunks_per_doc: documents are not chunked here; send "
                         "max_tokens_per_doc to truncate them")
    if body.relevant_spans is not None:
        raise BadRequest("relevant_spans: not supported by this server")
    check_encodable("query", body.query)
    if body.instruction is not None:
        check_encodable("instruction", body.instruction)
    for index, text in enumerate(texts_of(body)):
        check_encodable(f"documents[{index}]", text)


def truncate(text: str, max_tokens: int, tokenize: Tokenize) -> str:
    """The longest head of `text` that is at most `max_tokens` tokens (a text cut, so the expansion
    stays text). Binary search over its length: ~log2(len) tokenizations, only for a long text."""
    if len(tokenize(text)) <= max_tokens:
        return text
    short, long = 0, len(text)  # the head of `short` characters fits; of `long` it does not
    while long - short > 1:
        middle = (short + long) // 2
        if len(tokenize(text[:middle])) <= max_tokens:
            short = middle
        else:
            long = middle
    return text[:short]


def rerank_response(body: RerankRequest, relevance: list[float], num_prompt_tokens: int,
                    model: str, version: str) -> RerankResponse:
    """Results by relevance, best first (ties by index), the best top_n of them (None or 0: all)."""
    order = sorted(range(len(relevance)), key=lambda index: (-relevance[index], index))
    if body.top_n:
        order = order[:body.top_n]
    texts = texts_of(body)
    results = [RerankResult(index=index, relevance_score=relevance[index],
                            document=DocumentOut(text=texts[index]) if body.return_documents else None)
               for index in order]
    return RerankResponse(
        id=f"rerank-{uuid.uuid4().hex}", model=model, results=results,
        usage=RerankUsage(prompt_tokens=num_prompt_tokens, total_tokens=num_prompt_tokens),
        meta=RerankMeta(api_version=ApiVersion(version=version),
                        tokens=MetaTokens(input_tokens=num_prompt_tokens)))
