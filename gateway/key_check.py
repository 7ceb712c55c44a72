"""Does a worker take the gateway's API key? One cheap authenticated probe.

/get_load is open on the server, so its answers say nothing about the key. The probe is
`POST /v1/score` with the body `{}` and the gateway's key: the server checks the key before it
validates the body, so 401 means the key is refused and anything else (400 for the empty body)
that it is accepted; no model work either way. The poller probes a worker once it answers
/get_load while its verdict is unknown, and again every KEY_RECHECK_S while it refuses the key; a
routed request's 401 marks the worker as refusing at once (routing.py). Either verdict goes to
the registry (record_key), whose transition log writes the one line a change is worth.
"""
from __future__ import annotations

import aiohttp

from scoringfleet_contract.facts import SCORE_PATH

KEY_RECHECK_S = 5.0  # a worker that refused the key is asked again this often (it may be fixed)
PROBE_BODY = b"{}"


def key_header(api_key: str | None) -> dict[str, str]:
    """The gateway's key as a worker reads it ('Authorization: Bearer <key>'); none without a key."""
    return {} if api_key is None else {"authorization": f"Bearer {api_key}"}


async def probe_key(session: aiohttp.ClientSession, url: str, api_key: str,
                    timeout_s: float) -> bool | None:
    """True: the worker accepts `api_key`; False: it answered 401; None: no answer (the poll
    that follows will mark the worker failed)."""
    headers = {**key_header(api_key), "content-type": "application/json"}
    try:
        async with session.post(f"{url}{SCORE_PATH}", data=PROBE_BODY, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            await response.read()
            return response.status != 401
    except (TimeoutError, aiohttp.ClientError):
        return None
