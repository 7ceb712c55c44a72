"""The errors a scoring request can end in, each with its HTTP status (its SGLang error type:
scoringfleet_contract.facts.ERROR_TYPES)."""
from __future__ import annotations


class ScoreError(Exception):
    status_code = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def headers(self) -> dict[str, str]:
        """HTTP headers the error response carries."""
        return {}


class BadRequest(ScoreError):
    status_code = 400


class Unauthorized(ScoreError):
    status_code = 401


class NotFound(ScoreError):
    status_code = 404


class ServiceUnavailable(ScoreError):
    """Queue full, draining or the model still loading: the client should retry later, here or elsewhere."""

    status_code = 503

    def __init__(self, message: str, retry_after_s: int = 1, close_connection: bool = False) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.close_connection = close_connection

    @property
    def headers(self) -> dict[str, str]:
        headers = {"Retry-After": str(self.retry_after_s)}
        return {**headers, "Connection": "close"} if self.close_connection else headers


class RequestTimeout(ScoreError):
    status_code = 504


class InternalError(ScoreError):
    """The server itself failed (e.g. a forward pass raised); it keeps serving other requests."""


class ClientDisconnected(ScoreError):
    """The client went away before its answer; 499 as nginx logs it (nobody reads the body)."""

    status_code = 499


class ModelLoadError(RuntimeError):
    """The model could not be found or loaded (model_loader.py); the message, one line, says what
    to do, and the process exits 2. Here, not in model_loader, so startup.py can catch it without
    importing torch."""
