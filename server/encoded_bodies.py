"""ASGI middleware: refuse a request body sent with a Content-Encoding (gzip, deflate, ...) with
415, before it is read.

Nothing here decodes a body, so a compressed one could only fail as malformed JSON (400), which
says nothing about why; a 415 says what to change. The gateway decodes gzip and deflate and
passes them on plain (docs/gateway.md), so no compressed body reaches a server through it.
`identity` is no encoding.
"""
from __future__ import annotations

from starlette.responses import JSONResponse

from scoringfleet_contract.facts import error_body

ACCEPTED = (b"", b"identity")


class RefuseEncodedBodies:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            # every Content-Encoding header: a request may repeat it (gzip, then identity)
            encodings = [value for name, value in scope.get("headers", ())
                         if name == b"content-encoding"]
            refused = [value for value in encodings if value.strip().lower() not in ACCEPTED]
            if refused:
                return await _refusal(refused[0].decode("latin-1"))(scope, receive, send)
        return await self.app(scope, receive, send)


def _refusal(encoding: str) -> JSONResponse:
    message = (f"Content-Encoding {encoding!r} is not accepted: send the JSON body uncompressed "
               "(the fleet gateway decodes gzip and deflate)")
    return JSONResponse(error_body(415, message), status_code=415)
