"""Wire formats of /v1/rerank and /v2/rerank: Cohere's shape (v1 and v2 clients), which Jina and vLLM
also serve. Pydantic models only, strict types as in schemas.py.

What Cohere's clients send that we cannot honour is refused by name (rerank.py), never dropped:
`rank_fields` other than ["text"], `max_chunks_per_doc` (documents are truncated, not chunked),
`relevant_spans`. `priority` is accepted and not used (the queue is first come, first served).
"""
from __future__ import annotations

from typing import Annotated, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from server.schemas import MODEL_FIELD


class DocumentIn(BaseModel):
    """A document as an object (Cohere v1, Jina): its `text` is ranked; other keys are ignored."""

    model_config = ConfigDict(extra="ignore")
    text: StrictStr


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: StrictStr | None = Field(default=None, description=MODEL_FIELD)
    query: StrictStr = Field(description="The search query; filled into the template's shared head.")
    documents: list[Union[StrictStr, DocumentIn]] = Field(
        description="Texts (or {text} objects) to rank against the query; one scored item each.")
    top_n: Annotated[StrictInt, Field(ge=0)] | None = Field(
        default=None, description="Return only the best top_n (None or 0: all, as vLLM).")
    return_documents: StrictBool = Field(
        default=True, description="Each result carries its document's text (vLLM and Jina: yes).")
    max_tokens_per_doc: Annotated[StrictInt, Field(ge=1)] | None = Field(
        default=None, description="Truncate each document to this many tokens; without it a document "
                                  "too long for the context is a 400.")
    instruction: StrictStr | None = Field(
        default=None, description="The template's {instruction} (default: the template's own).")
    rank_fields: list[StrictStr] | None = None
    max_chunks_per_doc: StrictInt | None = None
    relevant_spans: object | None = None


class DocumentOut(BaseModel):
    text: str


class RerankResult(BaseModel):
    index: int
    relevance_score: float
    document: DocumentOut | None = None


class RerankUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class ApiVersion(BaseModel):
    version: str


class MetaTokens(BaseModel):
    input_tokens: int
    output_tokens: int = 0


class RerankMeta(BaseModel):
    api_version: ApiVersion
    tokens: MetaTokens


class RerankResponse(BaseModel):
    id: str
    model: str
    results: list[RerankResult]
    usage: RerankUsage
    meta: RerankMeta
