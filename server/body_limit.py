"""ASGI middleware: refuse request bodies larger than a limit with 413, before they are buffered.

A Content-Length over the limit is refused up front, before the app runs: this middleware sits
outside the app's exception handlers, so it writes SGLang's error body itself. A body without one
(chunked) is counted as it arrives; past the limit, the app's receive raises HTTPException(413),
which the app's handler turns into the same body. NOTE: an HTTPException, not a ScoreError:
FastAPI passes HTTPException through while it reads a body, and turns anything else into a 400.
"""
from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from scoringfleet_contract.facts import body_too_large, error_body


class BodySizeLimit:
    def __init__(self, app, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    @property
    def message(self) -> str:
        return body_too_large(self.max_bytes)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers", ())).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await self._refusal()(scope, receive, send)
        received = 0

        async def counting_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise HTTPException(413, self.message)
            return message

        await self.app(scope, counting_receive, send)

    def _refusal(self) -> JSONResponse:
        return JSONResponse(error_body(413, self.message), status_code=413)
