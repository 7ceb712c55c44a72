"""What every scoring route shares: the API key check, the error responses it documents, and
cancelling the work when the client hangs up (its sequences leave the queue)."""
from __future__ import annotations

import asyncio

from fastapi import Depends, Request

from scoringfleet_contract.facts import UNAUTHORIZED_MESSAGE, is_authorized
from server.config import ServerConfig
from server.errors import ClientDisconnected, Unauthorized
from server.schemas import ErrorResponse

# 404: a `model` not served here (served_models.py)
ERROR_RESPONSES = {code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 415, 500, 503, 504)}


def api_key_check(config: ServerConfig):
    async def require_api_key(request: Request) -> None:
        if not is_authorized(request.headers.get("authorization", ""), config.api_key):
            raise Unauthorized(UNAUTHORIZED_MESSAGE)
    return Depends(require_api_key)


async def cancel_on_disconnect(work, request: Request):
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
