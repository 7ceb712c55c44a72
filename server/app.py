"""create_app(config, engine, reranker): the HTTP surface. Routes, error mapping, lifespan; no scoring logic.

Every error leaves as SGLang's error body ({"object": "error", "message", "type", "code"}). Request
validation failures are 400 (SGLang's choice), not FastAPI's default 422.
"""
from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from scoringfleet_contract.facts import LOADING_HEADER, UNAUTHORIZED_MESSAGE, error_body, is_authorized
from server.body_limit import BodySizeLimit
from server.config import ServerConfig
from server.encoded_bodies import RefuseEncodedBodies
from server.engine import Engine
from server.errors import ClientDisconnected, NotFound, ScoreError, ServiceUnavailable, Unauthorized
from server.gc_freeze import freeze_gc
from server.rerank import Reranker, rerank_response, score_request
from server.rerank_schemas import RerankRequest, RerankResponse
from server.schemas import ErrorResponse, LoadEntry, ScoreRequest, ScoreResponse, Usage

log = logging.getLogger(__name__)

ERROR_RESPONSES = {code: {"model": ErrorResponse} for code in (400, 401, 413, 415, 500, 503, 504)}


def create_app(config: ServerConfig, engine: Engine, reranker: Reranker | None = None) -> FastAPI:
    """The app over `engine` (an Engine, or the EngineStartup that becomes one); `config` is the
    parsed one (an EngineStartup resolves device and dtype as it loads: engine.config after).
    `reranker`: the rerank template when the caller knows it (a server over a fake runner); else
    the one the model's load chose (EngineStartup.reranker). Without one, /v1/rerank and
    /v2/rerank answer 404 saying how to get one."""
    @asynccontextmanager
    async def lifespan(_: FastAPI):
        await engine.start()
        yield
        await engine.stop()

    app = FastAPI(title="ScoringFleet scoring server", version="0.1.0", lifespan=lifespan)
    app.add_middleware(BodySizeLimit, max_bytes=config.max_request_bytes)
    app.add_middleware(RefuseEncodedBodies)  # added last: runs first, before any byte is read
    _add_error_handlers(app)
    _add_score_route(app, config, engine)
    for version in ("1", "2"):
        _add_rerank_route(app, config, engine, reranker, version)
    _add_load_routes(app, engine)
    _add_probe_routes(app, engine)
    _add_info_routes(app, config, engine, reranker)
    _add_freeze_gc_route(app, config, engine)
    return app


def _api_key_check(config: ServerConfig):
    async def require_api_key(request: Request) -> None:
        if not is_authorized(request.headers.get("authorization", ""), config.api_key):
            raise Unauthorized(UNAUTHORIZED_MESSAGE)
    return Depends(require_api_key)


def _add_score_route(app: FastAPI, config: ServerConfig, engine: Engine) -> None:
    @app.post("/v1/score", response_model=ScoreResponse, responses=ERROR_RESPONSES,
              dependencies=[_api_key_check(config)])
    async def score(body: ScoreRequest, request: Request) -> ScoreResponse:
        result = await _cancel_on_disconnect(engine.score(body), request)
        return ScoreResponse(
            scores=result.scores,
            model=body.model or config.model_name,
            usage=Usage(prompt_tokens=result.num_prompt_tokens,
                        total_tokens=result.num_prompt_tokens),
        )


def _reranker_of(engine: Engine, reranker: Reranker | None) -> Reranker | None:
    """The template given to create_app, else the one the load chose (503 while it loads)."""
    return reranker if reranker is not None else getattr(engine, "reranker", None)


def _dict_or_none(reranker: Reranker | None) -> dict | None:
    return None if reranker is None else reranker.to_dict()


def _add_rerank_route(app: FastAPI, config: ServerConfig, engine: Engine, reranker: Reranker | None,
                      version: str) -> None:
    """Cohere's shape (server/rerank.py): one scoring request on the same engine, limits and key."""
    @app.post(f"/v{version}/rerank", response_model=RerankResponse, response_model_exclude_none=True,
              responses={**ERROR_RESPONSES, 404: {"model": ErrorResponse}},
              dependencies=[_api_key_check(config)])
    async def rerank(body: RerankRequest, request: Request) -> RerankResponse:
        chosen = _reranker_of(engine, reranker)
        if chosen is None:
            raise NotFound("this server has no rerank template for its model: start it with "
                           "--rerank-template NAME|FILE (docs/rerank.md)")
        scoring = score_request(chosen, body, engine.runner.tokenize, engine.input_limits,
                                engine.special_tokens)
        result = await _cancel_on_disconnect(engine.score(scoring), request)
        return rerank_response(body, [scores[1] for scores in result.scores], result.num_prompt_tokens,
                               body.model or config.model_name, version)


def _add_load_routes(app: FastAPI, engine: Engine) -> None:
    """Read from the scheduler when asked: true at every moment, a drain's included."""
    @app.get("/get_load", response_model=list[LoadEntry])
    async def get_load(response: Response) -> list[LoadEntry]:
        load = engine.load()
        # The body stays SGLang's; whether the model is still loading (load then 0) is a header.
        response.headers[LOADING_HEADER] = "true" if engine.is_loading else "false"
        return [LoadEntry(num_reqs=load.num_reqs, num_waiting_reqs=load.num_waiting,
                          num_tokens=load.num_tokens, ts_tic=time.perf_counter())]

    @app.get("/metrics", response_class=PlainTextResponse,
             responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text"}})
    async def metrics() -> Response:
        return Response(engine.metrics.render(),
                        media_type="text/plain; version=0.0.4; charset=utf-8")


def _add_probe_routes(app: FastAPI, engine: Engine) -> None:
    @app.get("/health", response_class=Response, responses={200: {"description": "Alive"}})
    async def health() -> Response:
        """Liveness: the process answers (also while draining)."""
        return Response(status_code=200)

    @app.get("/health_generate", response_class=Response,
             responses={200: {"description": "Ready"}, 503: {"model": ErrorResponse}})
    async def health_generate() -> Response:
        """Readiness: model loaded, loop alive, not draining."""
        if engine.is_ready:
            return Response(status_code=200)
        reason = ("draining" if engine.is_draining else "the model is loading" if engine.is_loading
                  else "engine loop not running")
        return _error_response(503, f"not ready: {reason}")


def _add_info_routes(app: FastAPI, config: ServerConfig, engine: Engine,
                     reranker: Reranker | None) -> None:
    @app.get("/v1/models")
    async def models() -> dict:
        max_model_len = engine.input_limits.max_context_tokens  # 503 while the model loads
        return {"object": "list", "data": [{
            "id": config.model_name, "object": "model", "owned_by": "scoring-fleet",
            "root": config.model_path, "max_model_len": max_model_len,
        }]}

    @app.get("/get_server_info")
    async def server_info() -> dict:
        """The effective arguments (device and dtype as resolved) and the model's limits."""
        limits = engine.input_limits  # 503 while the model loads
        return {**engine.config.to_dict(), "model_name": config.model_name,
                "context_length": limits.max_context_tokens,
                "vocab_size": limits.vocab_size,
                "rerank_template": _dict_or_none(_reranker_of(engine, reranker))}


def _add_freeze_gc_route(app: FastAPI, config: ServerConfig, engine: Engine) -> None:
    @app.api_route("/freeze_gc", methods=["GET", "POST"], response_class=PlainTextResponse,
                   dependencies=[_api_key_check(config)], responses=ERROR_RESPONSES)
    async def freeze_gc_route() -> Response:
        """SGLang's: after a warm-up, keep what is alive out of the collector's full passes."""
        if engine.is_loading:  # what is alive now is the load's garbage too
            raise ServiceUnavailable("the model is loading; freeze the collector once it serves")
        freeze_gc("POST /freeze_gc")
        return PlainTextResponse("Garbage collection frozen.\n")


async def _cancel_on_disconnect(work, request: Request):
    """Await `work`; if the client disconnects first, cancel it (its sequences leave the queue)."""
    work_task = asyncio.ensure_future(work)
    disconnect_task = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait({work_task, disconnect_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        disconnect_task.cancel()
        if not work_task.done():
            work_task.cancel()
            await asyncio.gather(work_task, return_exceptions=True)
    if work_task.cancelled():
        raise ClientDisconnected("client disconnected; its sequences were removed")
    return work_task.result()


async def _wait_for_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


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
        where = ".".join(str(part) for part in item.get("loc", ()))
        problems.append(f"{where}: {item.get('msg', 'invalid')}")
    return "; ".join(problems) or "invalid request"
