"""Wire formats of the other engines' routes a sequence classifier serves: TEI's `/rerank`, vLLM's
`/score` (text_1/text_2 and queries/documents), vLLM's and SGLang's `/classify`. Pydantic models
only, strict types as in schemas.py; unknown fields are ignored as those engines do.
"""
from __future__ import annotations

import time
from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, model_validator

from server.schemas import MODEL_FIELD

Texts = Union[StrictStr, list[StrictStr]]
# Keys that make a /v1/score body vLLM's shape rather than SGLang's (query, items, label_token_ids).
VLLM_SCORE_KEYS = ("text_1", "text_2", "queries", "documents")


class TeiRerankRequest(BaseModel):
    """TEI's POST /rerank."""

    model_config = ConfigDict(extra="ignore")
    query: StrictStr
    texts: list[StrictStr]
    raw_scores: StrictBool = Field(default=False, description="The head's logits, no sigmoid.")
    return_text: StrictBool = Field(default=False, description="Each result carries its text.")
    truncate: StrictBool | None = Field(default=None, description="Cut each text to what the context "
                                                                  "leaves (else too long is a 400).")
    truncation_direction: Literal["Right", "right"] = Field(
        default="Right", description="Texts are cut at their end (TEI's Left is not served).")


class TeiRank(BaseModel):
    index: int
    score: float
    text: str | None = None


class VllmScoreRequest(BaseModel):
    """vLLM's POST /score (and /v1/score): text_1 against text_2 (1:1, 1:N, N:N), or its newer
    queries against documents, the same rules."""

    model_config = ConfigDict(extra="ignore")
    model: StrictStr | None = Field(default=None, description=MODEL_FIELD)
    text_1: Texts | None = None
    text_2: Texts | None = None
    queries: Texts | None = None
    documents: Texts | None = None

    @model_validator(mode="after")
    def _one_shape(self) -> VllmScoreRequest:
        pairs = [(self.text_1, self.text_2), (self.queries, self.documents)]
        given = [pair for pair in pairs if pair != (None, None)]
        if len(given) != 1 or None in given[0]:
            raise ValueError("send text_1 and text_2, or queries and documents (vLLM's score shapes)")
        return self

    def pairs(self) -> list[tuple[str, str]]:
        """(query, document) per result, in vLLM's order: one first text against each second
        (1:N), or the two lists zipped (N:N); ValueError for any other pair of lengths."""
        first, second = (self.text_1, self.text_2) if self.text_1 is not None else (self.queries, self.documents)
        firsts = [first] if isinstance(first, str) else first
        seconds = [second] if isinstance(second, str) else second
        if len(firsts) == 1:
            firsts = firsts * len(seconds)
        if not seconds or len(firsts) != len(seconds):
            raise ValueError(f"{len(firsts)} first texts and {len(seconds)} second texts: the lengths "
                             "must be 1:1, 1:N or N:N")
        return list(zip(firsts, seconds))


class UsageInfo(BaseModel):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: int = 0


class VllmScoreData(BaseModel):
    index: int
    object: Literal["score"] = "score"
    score: float


class ListResponse(BaseModel):
    """OpenAI's list envelope, as vLLM answers /score and /classify: the data and usage follow."""

    id: str
    object: Literal["list"] = "list"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str


class VllmScoreResponse(ListResponse):
    data: list[VllmScoreData]
    usage: UsageInfo


class ClassifyRequest(BaseModel):
    """vLLM's POST /classify, SGLang's POST /v1/classify: one text or several."""

    model_config = ConfigDict(extra="ignore")
    model: StrictStr | None = Field(default=None, description=MODEL_FIELD)
    input: Texts


class ClassifyData(BaseModel):
    index: int
    label: str
    probs: list[float]
    num_classes: int


class ClassifyResponse(ListResponse):
    data: list[ClassifyData]
    usage: UsageInfo


def score_shape(body) -> str:
    """Which /v1/score body this is: "vllm" when it has one of vLLM's keys, else "sglang"."""
    return "vllm" if isinstance(body, dict) and any(key in body for key in VLLM_SCORE_KEYS) else "sglang"

