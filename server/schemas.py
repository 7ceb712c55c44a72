"""Wire formats of the scoring server (SGLang-compatible). Pydantic models only: no torch, no state.

Types are strict so that a JSON number is never silently turned into text or a string into a token
id: a request that does not mean exactly one thing is a 400, not a guess.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

# What a request's `model` may be (server/served_models.py).
MODEL_FIELD = ("A served name (absent: the primary one), a LoRA adapter's name, or <served name>:<adapter>; "
               "anything else is a 404. Echoed back.")

TokenId = Annotated[StrictInt, Field(ge=0)]
TokenIds = list[TokenId]


class ScoreRequest(BaseModel):
    """POST /v1/score. Unknown fields are ignored, as SGLang does (clients send e.g. `rid`)."""

    model_config = ConfigDict(extra="ignore")

    query: Union[StrictStr, TokenIds] = Field(
        description="Shared prefix of every item: text, or token ids.")
    items: Union[StrictStr, list[StrictStr], list[TokenIds]] = Field(
        description="Candidates, same kind as query: texts, or lists of token ids. "
                    "A single string is one item.")
    label_token_ids: Annotated[list[TokenId], Field(
        min_length=1, description="Token ids whose next-token probabilities are returned.")]
    apply_softmax: StrictBool = Field(
        default=False,
        description="false: full-vocabulary probabilities; true: softmax over the label tokens only.")
    item_first: StrictBool = Field(default=False, description="Score item+query instead of query+item.")
    model: StrictStr | None = Field(default=None, description=MODEL_FIELD)


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int = 0
    total_tokens: int


class ScoreResponse(BaseModel):
    scores: list[list[float]]
    model: str
    usage: Usage
    object: Literal["scoring"] = "scoring"


class ErrorResponse(BaseModel):
    object: Literal["error"] = "error"
    message: str
    type: str
    param: str | None = None
    code: int


class LoadEntry(BaseModel):
    """One data-parallel rank's load, as SGLang's /get_load reports it (counts in sequences)."""

    rid: Any = None
    http_worker_ipc: Any = None
    dp_rank: int | None = None
    num_reqs: int
    num_waiting_reqs: int
    num_tokens: int
    ts_tic: float
