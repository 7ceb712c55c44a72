"""One upstream attempt: POST the body unchanged to a worker's /v1/score (or the rerank path the
client called) and read its answer.

Tells a failure that may be retried elsewhere (refused, or reset before any response byte) from
an answer (any status, passed back unchanged). No choice of worker and no retry policy here.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp

from scoringfleet_contract.facts import SCORE_PATH

# Headers that come back to the client; those that go up are the caller's choice
# (intake.upstream_headers). Everything else is hop-by-hop or the gateway's own business.
RESPONSE_HEADERS = ("content-type", "retry-after")
# A connection on a cluster network opens in milliseconds; one that has not opened in this long
# goes to a pod that vanished with its IP dropping packets: give up and try another worker rather
# than wait out the whole request timeout with no byte sent.
CONNECT_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class Upstream:
    status: int
    headers: dict[str, str]
    body: bytes
    # A 503 that closes the connection: the worker is draining ("retry on another replica") and
    # did no work for this request.
    draining: bool = False


class Unreachable(Exception):
    """No response byte came back; `reason` is 'refused', 'connect-timeout' or 'reset'. Safe to
    retry elsewhere."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class BrokenAnswer(Exception):
    """The worker started answering, then the connection failed or the answer could not be read:
    not retried (502)."""


async def forward(session: aiohttp.ClientSession, worker_url: str, body: bytes,
                  headers: Mapping[str, str], timeout_s: float, path: str = SCORE_PATH) -> Upstream:
    """POST to the worker's `path` with exactly `headers`. Raises Unreachable, BrokenAnswer or
    asyncio.TimeoutError (the attempt outlived timeout_s)."""
    timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=CONNECT_TIMEOUT_S)
    try:
        response = await session.post(f"{worker_url}{path}", data=body, headers=headers,
                                      timeout=timeout)
    except aiohttp.ClientConnectorError as error:
        raise Unreachable("refused", str(error)) from error
    except aiohttp.ConnectionTimeoutError as error:  # NOTE: also a TimeoutError; caught first
        raise Unreachable("connect-timeout", f"no connection within {CONNECT_TIMEOUT_S} s") from error
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as error:
        raise Unreachable("reset", str(error)) from error
    except TimeoutError:
        raise  # the request timeout: the caller's 504 (some ClientErrors are TimeoutErrors too)
    except aiohttp.ClientError as error:  # e.g. a malformed response head: an answer, but broken
        raise BrokenAnswer(f"{worker_url} answered unreadably: {error}") from error
    try:
        async with response:
            payload = await response.read()
    except aiohttp.ClientError as error:
        raise BrokenAnswer(f"{worker_url} broke off its answer: {error}") from error
    kept = {name: response.headers[name] for name in RESPONSE_HEADERS if name in response.headers}
    closing = response.headers.get("connection", "").lower() == "close"
    return Upstream(response.status, kept, payload, draining=response.status == 503 and closing)
