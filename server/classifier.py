"""A sequence classifier as the routes see it: rerank pairs and classify texts as scoring requests.
Pure: no torch; the tokenizer only through the `tokenize` passed in.

A rerank pair is tokenized as the model's tokenizer pairs two texts (special_tokens.PairTokens):
before + query + middle is the shared head (the request's query: computed once for a decoder, the
first segment for an encoder), each document + after an item. A text to classify is one item,
with the tokenizer's single-text special tokens around it. The ScoreRequest carries token ids and
names classes, not tokens: label_token_ids are class indices (0 for a one-label reranker, all of
them for /classify) and apply_softmax asks for the checkpoint's activation (heads.class_scores);
without it the raw logits (TEI's raw_scores).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from scoringfleet_contract.facts import (
    CLASSIFY_PATHS,
    COHERE_RERANK_PATHS,
    SCORE_PATH,
    TEI_RERANK_PATH,
    VLLM_SCORE_PATH,
)
from server.classifier_support import activation_of, is_encoder, labels_of
from server.errors import BadRequest
from server.inputs import InputLimits, check_encodable, check_length
from server.rerank import Reranker, check_request, texts_of
from server.rerank_schemas import RerankRequest
from server.schemas import ScoreRequest
from server.special_tokens import PairTokens, SpecialTokens, pair_tokens_of

Tokenize = Callable[[str], list[int]]

LM_ROUTES = (f"{SCORE_PATH} (SGLang's shape: query, items, label_token_ids)",)
TEMPLATE_ROUTES = (*LM_ROUTES, *COHERE_RERANK_PATHS.values())
CLASSIFY_ROUTES = CLASSIFY_PATHS
RERANKER_ROUTES = (*COHERE_RERANK_PATHS.values(), TEI_RERANK_PATH, f"{VLLM_SCORE_PATH} and {SCORE_PATH} (vLLM's "
                   "shapes: text_1/text_2, queries/documents)", *CLASSIFY_PATHS)


def check_texts(field: str, texts: list[str], limits: InputLimits) -> None:
    """At least one text, at most max_items_per_request, each encodable; BadRequest naming `field`."""
    if not texts:
        raise BadRequest(f"{field}: must hold at least one text")
    if len(texts) > limits.max_items_per_request:
        raise BadRequest(f"{field}: {len(texts)} texts exceed max_items_per_request="
                         f"{limits.max_items_per_request}")
    for index, text in enumerate(texts):
        check_encodable(f"{field}[{index}]", text)


@dataclass(frozen=True)
class Classifier:
    labels: tuple[str, ...]   # class names in index order (id2label)
    activation: str           # classifier_support.SIGMOID or SOFTMAX
    pair: PairTokens
    is_encoder: bool

    @classmethod
    def of(cls, model_config, tokenizer) -> Classifier:
        """ValueError when the tokenizer's pair cannot be read (special_tokens.pair_tokens_of)."""
        return cls(labels_of(model_config), activation_of(model_config), pair_tokens_of(tokenizer),
                   is_encoder(model_config))

    @property
    def is_reranker(self) -> bool:
        """One label: a relevance score (bge-reranker, Qwen3-Reranker-seq-cls, reward models)."""
        return len(self.labels) == 1

    @property
    def routes(self) -> tuple[str, ...]:
        return RERANKER_ROUTES if self.is_reranker else CLASSIFY_ROUTES

    def to_dict(self) -> dict:
        return {"kind": "cross-encoder" if self.is_encoder else "decoder classification head",
                "labels": list(self.labels), "activation": self.activation}

    def relevance(self, row: list[float]) -> float:
        return row[0]

    def rerank_request(self, body: RerankRequest, tokenize: Tokenize, limits: InputLimits,
                       special: SpecialTokens) -> ScoreRequest:
        """A Cohere rerank (rerank_schemas.py) as one scoring request; BadRequest names the field."""
        check_request(body, limits)
        if body.instruction is not None:
            raise BadRequest("instruction: this model scores (query, document) pairs as its tokenizer "
                             "pairs them; it takes no instruction")
        return self.pair_request(body.query, texts_of(body), tokenize, limits, body.max_tokens_per_doc)

    def pair_request(self, query: str, documents: list[str], tokenize: Tokenize, limits: InputLimits,
                     max_tokens_per_doc: int | None = None, fit: bool = False,
                     raw: bool = False, field: str = "documents") -> ScoreRequest:
        """One query against its documents; BadRequest naming the document that does not fit.
        max_tokens_per_doc: cut each document to its first that many tokens; fit: cut each to
        what the context leaves (TEI's truncate). raw: logits, not the activation's scores.
        `field`: the documents' name in a 400 (TEI's are `texts`)."""
        head = [*self.pair.before, *tokenize(query), *self.pair.middle]
        room = min(limits.max_context_tokens, limits.max_sequence_tokens) - len(head) - len(self.pair.after)
        items = []
        for index, text in enumerate(documents):
            ids = tokenize(text)[:max_tokens_per_doc]
            if fit:
                ids = ids[:max(room, 0)]
            own = [*ids, *self.pair.after]
            check_length(f"{field}[{index}]", len(head) + len(own), limits, " (query and document)",
                         "; send max_tokens_per_doc (truncate) to cut documents" if not fit else "")
            items.append(own)
        return ScoreRequest(query=head, items=items, label_token_ids=[0], apply_softmax=not raw)

    def classify_request(self, texts: list[str], tokenize: Tokenize, limits: InputLimits,
                         special: SpecialTokens) -> ScoreRequest:
        """Each text one item (no shared query); every class's score after the activation."""
        check_texts("input", texts, limits)
        items = []
        for index, text in enumerate(texts):
            ids = [*special.before, *tokenize(text), *special.after]
            check_length(f"input[{index}]", len(ids), limits)
            items.append(ids)
        return ScoreRequest(query=[], items=items, label_token_ids=list(range(len(self.labels))),
                            apply_softmax=True)

    def label_of(self, probs: list[float]) -> str:
        """The most probable class's name (vLLM's and SGLang's `label`)."""
        return self.labels[max(range(len(probs)), key=probs.__getitem__)]


def routes_of(head: Reranker | Classifier | None) -> tuple[str, ...]:
    """The scoring routes a server serves, by its model's head (a 400 for any other names them)."""
    if isinstance(head, Classifier):
        return head.routes
    return LM_ROUTES if head is None else TEMPLATE_ROUTES


def kind_of(head: Reranker | Classifier | None) -> str:
    if isinstance(head, Classifier):
        labels = "one label" if head.is_reranker else f"{len(head.labels)} labels"
        return f"a {head.to_dict()['kind']} with {labels}"
    return "a causal LM" + ("" if head is None else f" with the rerank template {head.template.name}")


def refusal(path: str, head: Reranker | Classifier | None) -> BadRequest:
    return BadRequest(f"{path} is not served for this model ({kind_of(head)}); it serves "
                      f"{'; '.join(routes_of(head))}")
