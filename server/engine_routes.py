"""The other engines' routes over the same engine: TEI's `/rerank`, vLLM's `/score` shapes and
vLLM's / SGLang's `/classify` (engine_shapes.py), served for a sequence classifier
(classifier.py); for any other model a 400 that names the routes it serves. Each is one or a few
`engine.score` calls of token-id scoring requests: the same queue, limits, key and metrics as
/v1/score. No scoring logic here.
"""
from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, Callable, Union

from fastapi import FastAPI, Request
from pydantic import Discriminator, Tag

from scoringfleet_contract.facts import CLASSIFY_PATHS, SCORE_PATH, TEI_RERANK_PATH, VLLM_SCORE_PATH
from server.classifier import Classifier, check_texts, refusal
from server.config import ServerConfig
from server.engine_shapes import (
    ClassifyData,
    ClassifyRequest,
    ClassifyResponse,
    TeiRank,
    TeiRerankRequest,
    UsageInfo,
    VllmScoreData,
    VllmScoreRequest,
    VllmScoreResponse,
    score_shape,
)
from server.errors import BadRequest
from server.http_common import ERROR_RESPONSES, api_key_check, cancel_on_disconnect
from server.inputs import check_encodable
from server.interfaces import ScoringService
from server.schemas import ScoreRequest
from server.served_models import ServedModels

# /v1/score's body: SGLang's shape, or vLLM's when it has one of vLLM's keys (engine_shapes).
ScoreBody = Annotated[Union[Annotated[ScoreRequest, Tag("sglang")], Annotated[VllmScoreRequest, Tag("vllm")]],
                      Discriminator(score_shape)]
SHAPE_TAGS = ("sglang", "vllm")  # what the union puts in a validation error's location
HeadOf = Callable[[], object]  # the model's head as the load chose it (503 while loading)


def reranker_head(path: str, head) -> Classifier:
    """The classifier when it scores relevance (one label); else the 400 naming what it serves."""
    if isinstance(head, Classifier) and head.is_reranker:
        return head
    raise refusal(path, head)


def add_engine_routes(app: FastAPI, config: ServerConfig, engine: ScoringService, head_of: HeadOf,
                      served: ServedModels) -> None:
    """TEI's body has no `model` (TEI serves one): its /rerank scores the base model."""
    checks = [api_key_check(config)]

    @app.post(TEI_RERANK_PATH, response_model=list[TeiRank], response_model_exclude_none=True,
              responses=ERROR_RESPONSES, dependencies=checks)
    async def tei_rerank(body: TeiRerankRequest, request: Request) -> list[TeiRank]:
        """TEI's rerank: ranks best first; raw_scores, return_text, truncate."""
        head = reranker_head(TEI_RERANK_PATH, head_of())
        check_texts("texts", body.texts, engine.input_limits)
        check_encodable("query", body.query)
        scoring = head.pair_request(body.query, body.texts, engine.runner.tokenize, engine.input_limits,
                                    fit=bool(body.truncate), raw=body.raw_scores, field="texts")
        result = await cancel_on_disconnect(engine.score(scoring), request)
        scores = [head.relevance(row) for row in result.scores]
        order = sorted(range(len(scores)), key=lambda index: (-scores[index], index))
        return [TeiRank(index=index, score=scores[index], text=body.texts[index] if body.return_text else None)
                for index in order]

    @app.post(VLLM_SCORE_PATH, response_model=VllmScoreResponse, responses=ERROR_RESPONSES, dependencies=checks)
    async def score(body: VllmScoreRequest, request: Request) -> VllmScoreResponse:
        """vLLM's score: text_1/text_2 or queries/documents, 1:1, 1:N or N:N."""
        adapter = served.resolve(body.model)
        return await vllm_score(config, engine, head_of(), body, request, VLLM_SCORE_PATH, adapter)

    for path in CLASSIFY_PATHS:
        _add_classify_route(app, path, config, engine, head_of, checks, served)


def _add_classify_route(app: FastAPI, path: str, config: ServerConfig, engine: ScoringService, head_of: HeadOf,
                        checks: list, served: ServedModels) -> None:
    @app.post(path, response_model=ClassifyResponse, responses=ERROR_RESPONSES, dependencies=checks)
    async def classify(body: ClassifyRequest, request: Request) -> ClassifyResponse:
        """vLLM's /classify (SGLang's /v1/classify): one row of class probabilities per input."""
        adapter = served.resolve(body.model)
        head = head_of()
        if not isinstance(head, Classifier):
            raise refusal(path, head)
        texts = [body.input] if isinstance(body.input, str) else body.input
        scoring = head.classify_request(texts, engine.runner.tokenize, engine.input_limits,
                                        engine.special_tokens)
        result = await cancel_on_disconnect(engine.score(scoring, adapter), request)
        data = [ClassifyData(index=index, label=head.label_of(row), probs=row, num_classes=len(row))
                for index, row in enumerate(result.scores)]
        return ClassifyResponse(id=f"classify-{uuid.uuid4().hex}", model=body.model or config.model_name,
                                data=data, usage=_usage(result.num_prompt_tokens))


async def vllm_score(config: ServerConfig, engine: ScoringService, head, body: VllmScoreRequest,
                     request: Request, path: str = SCORE_PATH, adapter: str | None = None) -> VllmScoreResponse:
    """vLLM's answer: one score per pair, in the pairs' order. The pairs of one first text are one
    scoring request (its query computed once on a decoder); N:N pairs are N requests at once, all
    through `adapter` (None: the base model)."""
    head = reranker_head(f"{path} (vLLM's shape)", head)
    try:
        pairs = body.pairs()
    except ValueError as error:
        raise BadRequest(str(error)) from None
    check_texts("documents", [document for _, document in pairs], engine.input_limits)
    by_query: dict[str, list[int]] = {}
    for index, (query, _) in enumerate(pairs):
        by_query.setdefault(query, []).append(index)
    check_texts("queries", list(by_query), engine.input_limits)
    scorings = [head.pair_request(query, [pairs[index][1] for index in indexes], engine.runner.tokenize,
                                  engine.input_limits) for query, indexes in by_query.items()]
    results = await cancel_on_disconnect(asyncio.gather(*(engine.score(s, adapter) for s in scorings)), request)
    scores = [0.0] * len(pairs)
    for indexes, result in zip(by_query.values(), results):
        for index, row in zip(indexes, result.scores):
            scores[index] = head.relevance(row)
    return VllmScoreResponse(id=f"score-{uuid.uuid4().hex}", model=body.model or config.model_name,
                             data=[VllmScoreData(index=index, score=score) for index, score in enumerate(scores)],
                             usage=_usage(sum(result.num_prompt_tokens for result in results)))


def _usage(num_prompt_tokens: int) -> UsageInfo:
    return UsageInfo(prompt_tokens=num_prompt_tokens, total_tokens=num_prompt_tokens)
