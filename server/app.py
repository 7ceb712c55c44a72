"""create_app(config, engine, reranker): the HTTP surface. Routes, error mapping, lifespan; no scoring logic.
The other engines' routes (TEI's /rerank, vLLM's /score and /classify) are engine_routes.py's.

Every error leaves as SGLang's error body ({"object": "error", "message", "type", "code"}). Request
validation failures are 400 (SGLang's choice), not FastAPI's default 422.
"""
from __future__ import annotations

import logging
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from scoringfleet_contract.facts import (
    COHERE_RERANK_PATHS,
    HEALTH_GENERATE_PATH,
    HEALTH_PATH,
    LOAD_PATH,
    LOADING_HEADER,
    METRICS_PATH,
    MODELS_PATH,
    SCORE_PATH,
    SERVER_INFO_PATH,
    error_body,
)
from server.body_limit import BodySizeLimit
from server.classifier import Classifier, refusal, routes_of
from server.config import ServerConfig
from server.encoded_bodies import RefuseEncodedBodies
from server.engine_routes import SHAPE_TAGS, ScoreBody, add_engine_routes, vllm_score
from server.engine_shapes import VllmScoreRequest, VllmScoreResponse
from server.errors import NotFound, ScoreError, ServiceUnavailable
from server.gc_freeze import freeze_gc
from server.http_common import ERROR_RESPONSES, api_key_check, cancel_on_disconnect
from server.interfaces import ScoringService
from server.rerank import Reranker, rerank_response
from server.rerank_schemas import RerankRequest, RerankResponse
from server.schemas import ErrorResponse, LoadEntry, ScoreResponse, Usage
from server.served_models import ServedModels

log = logging.getLogger(__name__)


def create_app(config: ServerConfig, engine: ScoringService, reranker: Reranker | Classifier | None = None) -> FastAPI:
    """The app over `engine` (a ScoringService: an Engine, or the EngineStartup that becomes one); `config` is the
    parsed one (an EngineStartup resolves device and dtype as it loads: engine.config after).
    `reranker`: the model's head as the routes see it when the caller knows it (a server over a
    fake runner): a rerank template, or a sequence classifier's Classifier; else the one the
    model's load chose (engine.reranker). A causal LM without a template answers 404 on
    /v1/rerank and /v2/rerank saying how to get one; a route the model does not serve is a 400
    naming those it does (classifier.routes_of)."""
    @asynccontextmanager
    async def lifespan(_: FastAPI):
        await engine.start()
        yield
        await engine.stop()

    app = FastAPI(title="ScoringFleet scoring server", version="0.1.0", lifespan=lifespan)
    app.add_middleware(BodySizeLimit, max_bytes=config.max_request_bytes)
    app.add_middleware(RefuseEncodedBodies)  # added last: runs first, before any byte is read
    _add_error_handlers(app)
    served = ServedModels(config.served_names, tuple(config.adapter_paths))
    _add_score_route(app, config, engine, reranker, served)
    add_engine_routes(app, config, engine, lambda: _reranker_of(engine, reranker), served)
    for version in COHERE_RERANK_PATHS:
        _add_rerank_route(app, config, engine, reranker, version, served)
    _add_load_routes(app, engine)
    _add_probe_routes(app, engine)
    _add_info_routes(app, config, engine, reranker)
    _add_freeze_gc_route(app, config, engine)
    return app


def _add_score_route(app: FastAPI, config: ServerConfig, engine: ScoringService, reranker,
                     served: ServedModels) -> None:
    @app.post(SCORE_PATH, response_model=ScoreResponse | VllmScoreResponse, responses=ERROR_RESPONSES,
              dependencies=[api_key_check(config)])
    async def score(body: ScoreBody, request: Request) -> ScoreResponse | VllmScoreResponse:
        """SGLang's shape (query, items, label_token_ids) for a causal LM; vLLM's (text_1/text_2,
        queries/documents) for a sequence classifier (engine_routes.vllm_score)."""
        adapter = served.resolve(body.model)  # 404 for a model not served here
        head = _reranker_of(engine, reranker)
        if isinstance(body, VllmScoreRequest):
            return await vllm_score(config, engine, head, body, request, adapter=adapter)
        if isinstance(head, Classifier):
            raise refusal("/v1/score in SGLang's shape (query, items, label_token_ids)", head)
        result = await cancel_on_disconnect(engine.score(body, adapter), request)
        return ScoreResponse(
            scores=result.scores,
            model=body.model or config.model_name,
            usage=Usage(prompt_tokens=result.num_prompt_tokens,
                        total_tokens=result.num_prompt_tokens),
        )


def _reranker_of(engine: ScoringService, reranker: Reranker | Classifier | None) -> Reranker | Classifier | None:
    """The head given to create_app, else the one the load chose (503 while it loads)."""
    return reranker if reranker is not None else engine.reranker


def _dict_if(head, kind: type) -> dict | None:
    return head.to_dict() if isinstance(head, kind) else None


def _add_rerank_route(app: FastAPI, config: ServerConfig, engine: ScoringService,
                      reranker: Reranker | Classifier | None, version: str, served: ServedModels) -> None:
    """Cohere's shape (server/rerank.py): one scoring request on the same engine, limits and key,
    built by the template (a causal LM) or as the tokenizer pairs texts (a one-label classifier)."""
    @app.post(COHERE_RERANK_PATHS[version], response_model=RerankResponse, response_model_exclude_none=True,
              responses={**ERROR_RESPONSES, 404: {"model": ErrorResponse}},
              dependencies=[api_key_check(config)])
    async def rerank(body: RerankRequest, request: Request) -> RerankResponse:
        adapter = served.resolve(body.model)
        chosen = _reranker_of(engine, reranker)
        if chosen is None:
            raise NotFound("this server has no rerank template for its model: start it with "
                           "--rerank-template NAME|FILE (docs/rerank.md)")
        if isinstance(chosen, Classifier) and not chosen.is_reranker:
            raise refusal(f"/v{version}/rerank", chosen)
        scoring = chosen.rerank_request(body, engine.runner.tokenize, engine.input_limits, engine.special_tokens)
        result = await cancel_on_disconnect(engine.score(scoring, adapter), request)
        return rerank_response(body, [chosen.relevance(row) for row in result.scores], result.num_prompt_tokens,
                               body.model or config.model_name, version)


def _add_load_routes(app: FastAPI, engine: ScoringService) -> None:
    """Read from the scheduler when asked: true at every moment, a drain's included."""
    @app.get(LOAD_PATH, response_model=list[LoadEntry])
    async def get_load(response: Response) -> list[LoadEntry]:
        load = engine.load()
        # The body stays SGLang's; whether the model is still loading (load then 0) is a header.
        response.headers[LOADING_HEADER] = "true" if engine.is_loading else "false"
        return [LoadEntry(num_reqs=load.num_reqs, num_waiting_reqs=load.num_waiting,
                          num_tokens=load.num_tokens, ts_tic=time.perf_counter())]

    @app.get(METRICS_PATH, response_class=PlainTextResponse,
             responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text"}})
    async def metrics() -> Response:
        return Response(engine.metrics.render(),
                        media_type="text/plain; version=0.0.4; charset=utf-8")


def _add_probe_routes(app: FastAPI, engine: ScoringService) -> None:
    @app.get(HEALTH_PATH, response_class=Response, responses={200: {"description": "Alive"}})
    async def health() -> Response:
        """Liveness: the process answers (also while draining)."""
        return Response(status_code=200)

    @app.get(HEALTH_GENERATE_PATH, response_class=Response,
             responses={200: {"description": "Ready"}, 503: {"model": ErrorResponse}})
    async def health_generate() -> Response:
        """Readiness: model loaded, loop alive, not draining."""
        if engine.is_ready:
            return Response(status_code=200)
        reason = ("draining" if engine.is_draining else "the model is loading" if engine.is_loading
                  else "engine loop not running")
        return _error_response(503, f"not ready: {reason}")


def _add_info_routes(app: FastAPI, config: ServerConfig, engine: ScoringService,
                     reranker: Reranker | None) -> None:
    created = int(time.time())

    @app.get(MODELS_PATH)
    async def models() -> dict:
        """vLLM's list: each served name, then each LoRA adapter (its parent the primary name)."""
        max_model_len = engine.input_limits.max_context_tokens  # 503 while the model loads
        card = {"object": "model", "created": created, "owned_by": "scoring-fleet", "max_model_len": max_model_len}
        return {"object": "list", "data": [
            *({**card, "id": name, "root": config.model_path, "parent": None} for name in config.served_names),
            *({**card, "id": name, "root": path, "parent": config.model_name}
              for name, path in config.adapter_paths.items()),
        ]}

    @app.get(SERVER_INFO_PATH)
    async def server_info() -> dict:
        """The effective arguments (device and dtype as resolved) and the model's limits."""
        limits = engine.input_limits  # 503 while the model loads
        head = _reranker_of(engine, reranker)
        return {**engine.config.to_dict(), "model_name": config.model_name,
                "context_length": limits.max_context_tokens,
                "vocab_size": limits.vocab_size,
                "rerank_template": _dict_if(head, Reranker), "classifier": _dict_if(head, Classifier),
                "routes": list(routes_of(head))}


def _add_freeze_gc_route(app: FastAPI, config: ServerConfig, engine: ScoringService) -> None:
    @app.api_route("/freeze_gc", methods=["GET", "POST"], response_class=PlainTextResponse,
                   dependencies=[api_key_check(config)], responses=ERROR_RESPONSES)
    async def freeze_gc_route() -> Response:
        """SGLang's: after a warm-up, keep what is alive out of the collector's full passes."""
        if engine.is_loading:  # what is alive now is the load's garbage too
            raise ServiceUnavailable("the model is loading; freeze the collector once it serves")
        freeze_gc("POST /freeze_gc")
        return PlainTextResponse("Garbage collection frozen.\n")


def _error_response(status: int, message: str, headers=None) -> JSONResponse:
    return JSONResponse(error_body(status, message), status_code=status, headers=headers)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ScoreError)
    async def on_score_error(_: Request, error: ScoreError) -> JSONResponse:
        return _error_response(error.status_code, error.message, error.headers)

    @app.exception_handler(RequestValidationError)
    async def on_invalid_request(_: Request, error: RequestValidationError) -> JSONResponse:
        return _error_response(400, _describe_validation(error))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        return _error_response(error.status_code, str(error.detail),
                               getattr(error, "headers", None))

    @app.exception_handler(Exception)
    async def on_unexpected(_: Request, error: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return _error_response(500, f"{type(error).__name__}: {error}")


def _describe_validation(error: RequestValidationError) -> str:
    """One line per problem: where it is and what is wrong (e.g. 'body.label_token_ids: ...')."""
    problems = []
    for item in error.errors():
        # /v1/score's two shapes put their tag after "body": not a place in the request
        where = ".".join(str(part) for part in item.get("loc", ()) if part not in SHAPE_TAGS)
        problems.append(f"{where}: {item.get('msg', 'invalid')}")
    return "; ".join(problems) or "invalid request"
