"""ASGI middleware: refuse a request body sent with a Content-Encoding (gzip, deflate, ...) with
415, before it is read.

Nothing here decodes a body, so a compressed one could only fail as malformed JSON (400), which
says nothing about why; a 415 says what to change. The gateway decodes gzip and deflate and
passes them on plain (docs/gateway.md), so no compressed body reaches a server through it.
`identity` is no encoding.
"""
from __future__ import annotations

import json

ACCEPTED = (b"", b"identity")


class RefuseEncodedBodies:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            encoding = dict(scope.get("headers", ())).get(b"content-encoding", b"")
            if encoding.strip().lower() not in ACCEPTED:
                return await _refuse(send, encoding.decode("latin-1"))
        return await self.app(scope, receive, send)


async def _refuse(send, encoding: str) -> None:
    message = (f"Content-Encoding {encoding!r} is not accepted: send the JSON body uncompressed "
               "(the fleet gateway decodes gzip and deflate)")
    body = json.dumps({"object": "error", "message": message, "type": "BadRequestError",
                       "param": None, "code": 415}).encode()
    await send({"type": "http.response.start", "status": 415,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
