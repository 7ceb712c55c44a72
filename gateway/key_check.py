"""Does a worker take the gateway's API key? One cheap authenticated probe, and the one place that
records the verdict and says so in the log.

/get_load is open on the server, so its answers say nothing about the key. The probe is
`POST /v1/score` with the body `{}` and the gateway's key: the server checks the key before it
validates the body, so 401 means the key is refused and anything else (400 for the empty body)
that it is accepted; no model work either way. The poller probes a worker once it answers
/get_load while its verdict is unknown, and again every KEY_RECHECK_S while it refuses the key; a
routed request's 401 marks the worker as refusing at once (routing.py).
"""
from __future__ import annotations

import logging

import aiohttp

from gateway.config import API_KEY_ENV
from gateway.workers import WorkerRegistry

log = logging.getLogger(__name__)

KEY_RECHECK_S = 5.0  # a worker that refused the key is asked again this often (it may be fixed)
PROBE_BODY = b"{}"


async def probe_key(session: aiohttp.ClientSession, url: str, api_key: str,
                    timeout_s: float) -> bool | None:
    """True: the worker accepts `api_key`; False: it answered 401; None: no answer (the poll
    that follows will mark the worker failed)."""
    headers = {"authorization": f"Bearer {api_key}", "content-type": "application/json"}
    try:
        async with session.post(f"{url}/v1/score", data=PROBE_BODY, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            await response.read()
            return response.status != 401
    except (TimeoutError, aiohttp.ClientError):
        return None


def note_key(registry: WorkerRegistry, url: str, accepted: bool, evidence: str) -> None:
    """Record whether `url` takes the key; a log line when that changes (`evidence`: what said
    so, e.g. 'the key probe')."""
    if not registry.record_key(url, accepted):
        return
    if accepted:
        log.info("worker %s accepts the gateway's API key (%s)", url, evidence)
    else:
        log.warning("worker %s rejects the gateway's API key (401 to %s): not ready until it "
                    "accepts it; the gateway and the servers must share one key (env %s)",
                    url, evidence, API_KEY_ENV)
