"""The facts the scoring server, the fleet gateway and the operator share, each written once.

The three programs may not import each other (pyproject.toml's import contracts); each may import
this module, which imports only the standard library. Here is what one program renders and another
reads (an env var's name, a probe's path), what a client sees from either tier (the error body and
its type, the 413's text, the API key rule) and what one must wait for of another (shutdown bounds).
"""
from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

# ---- environment: one prefix for every variable the programs read -------------------------------
ENV_PREFIX = "SCORINGFLEET_"
API_KEY_ENV = ENV_PREFIX + "API_KEY"  # server and gateway; the operator renders it from a Secret
# (the operator's own settings, which only it and the chart read, are its: fleet_operator/context.py)

# ---- the pods: the label the operator puts on a fleet's scoring pods, the gateway discovers by ---
API_GROUP = "scoring.fleet.dev"
FLEET_LABEL = f"{API_GROUP}/fleet"
HTTP_PORT_NAME = "http"  # the container port every pod the operator builds serves on


def http_port(pod: Mapping[str, Any]) -> int | None:
    """A Pod body's container port named HTTP_PORT_NAME (the gateway's workers, the operator's scrape
    of a gateway pod), or None."""
    for container in (pod.get("spec") or {}).get("containers") or ():
        for port in container.get("ports") or ():
            if port.get("name") == HTTP_PORT_NAME and isinstance(port.get("containerPort"), int):
                return port["containerPort"]
    return None

# ---- the API key --------------------------------------------------------------------------------
UNAUTHORIZED_MESSAGE = "missing or wrong API key: send 'Authorization: Bearer <key>'"


def api_key_problem(api_key: str | None) -> str | None:
    """Why a configured key is refused, or None (no key is fine). A client's token is compared
    stripped and the gateway sends the key on in a header, so an empty key or one with surrounding
    whitespace would refuse every client (or, empty, let in a bare 'Bearer '). Never holds the key."""
    if api_key is not None and (not api_key or api_key != api_key.strip()):
        return ("the API key must not be empty nor begin or end with whitespace "
                "(a Secret's value with a trailing newline?)")
    return None


def is_authorized(authorization: str, api_key: str | None) -> bool:
    """True without a key; else the header must be 'Bearer <key>' (compared in constant time)."""
    if api_key is None:
        return True
    scheme, _, token = authorization.partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(token.strip().encode(), api_key.encode())


# ---- the error body (SGLang's) -------------------------------------------------------------------
# SGLang's error types where it has one, OpenAI's names for the rest; any other status is a 400's.
ERROR_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
               405: "BadRequestError", 413: "BadRequestError", 415: "BadRequestError",
               499: "ClientClosedRequest", 500: "InternalServerError", 502: "BadGatewayError",
               503: "ServiceUnavailableError", 504: "TimeoutError"}


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """The error body of both tiers; `param` names the tier that answered when not the server."""
    return {"object": "error", "message": message, "type": ERROR_TYPES.get(status, "BadRequestError"),
            "param": param, "code": status}


# ---- request limits (the gateway's defaults are the server's) ------------------------------------
DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024
DEFAULT_HEADER_TIMEOUT_S = 5.0


def body_too_large(max_bytes: int) -> str:
    """The 413's message."""
    return f"request body exceeds the limit of {max_bytes} bytes"


# ---- routes: what a client may POST (the server serves them, the gateway forwards them) ----------
SCORE_PATH = "/v1/score"           # SGLang's; vLLM's shapes too
COHERE_RERANK_PATHS = {"1": "/v1/rerank", "2": "/v2/rerank"}  # by Cohere's API version
TEI_RERANK_PATH = "/rerank"
VLLM_SCORE_PATH = "/score"
CLASSIFY_PATHS = ("/classify", "/v1/classify")  # vLLM's, SGLang's
SCORING_PATHS = (SCORE_PATH, *COHERE_RERANK_PATHS.values(), TEI_RERANK_PATH, VLLM_SCORE_PATH, *CLASSIFY_PATHS)
MODELS_PATH = "/v1/models"         # OpenAI's list: served names and adapters
SERVER_INFO_PATH = "/get_server_info"

# ---- paths: the probes the operator renders, the ones no access-log line is written for ----------
HEALTH_PATH = "/health"                    # liveness (both); the gateway pods' readiness too
HEALTH_GENERATE_PATH = "/health_generate"  # the server's readiness
READY_PATH = "/ready"                      # the gateway's: a usable worker
LOAD_PATH = "/get_load"
LOADING_HEADER = "X-Model-Loading"  # on /get_load's answer: "true" while the model loads
METRICS_PATH = "/metrics"
PROBE_PATHS = frozenset({HEALTH_PATH, HEALTH_GENERATE_PATH, READY_PATH})
# Probes, polls and scrapes come many times a second per worker and would bury the lines that matter.
QUIET_PATHS = PROBE_PATHS | {LOAD_PATH, METRICS_PATH}


def is_quiet(path: str) -> bool:
    """True for a path (query string or not) whose requests write no access-log line."""
    return path.partition("?")[0] in QUIET_PATHS


# ---- shutdown bounds: what each process may take after its drain, which the pods' grace covers ---
SERVER_SHUTDOWN_S = 5    # uvicorn's graceful shutdown: the last responses written
GATEWAY_SHUTDOWN_S = 60  # aiohttp's shutdown_timeout (its default): in-flight requests finish
