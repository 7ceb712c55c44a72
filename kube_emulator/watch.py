"""Watch streams: replay the store's event log from a resourceVersion, then follow it live.

Owns: which events a watcher sees (resource, namespace, selectors; an object that starts or stops
matching a selector is ADDED or DELETED, as the API server does), the initial-events-end BOOKMARK, and
the bounded stream loop (ends on timeoutSeconds, client disconnect, or emulator shutdown).
"""
import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp.web

from kube_emulator.store import Event, GroupPlural, Store

Matcher = Callable[[dict[str, Any]], bool]
Render = Callable[[dict[str, Any]], dict[str, Any]]
_POLL_S = 0.5  # how often an idle watch checks for a gone client or a shutdown


@dataclass(frozen=True)
class WatchQuery:
    resource: GroupPlural
    namespace: str | None
    matches: Matcher


def translate(event: Event, query: WatchQuery) -> tuple[str, dict[str, Any]] | None:
    """The (type, object) a watcher with this query sees for an event, or None."""
    if event.resource != query.resource:
        return None
    if query.namespace is not None and event.obj['metadata'].get('namespace') != query.namespace:
        return None
    now_matches = query.matches(event.obj)
    if event.type != 'MODIFIED' or event.old is None:
        return (event.type, event.obj) if now_matches else None
    was_matching = query.matches(event.old)
    if now_matches:
        return ('MODIFIED' if was_matching else 'ADDED', event.obj)
    return ('DELETED', event.obj) if was_matching else None


def bookmark(kind: str, api_version: str, rv: int, initial_events_end: bool) -> dict[str, Any]:
    annotations = {'k8s.io/initial-events-end': 'true'} if initial_events_end else {}
    return {'type': 'BOOKMARK', 'object': {'kind': kind, 'apiVersion': api_version,
                                           'metadata': {'resourceVersion': str(rv), 'annotations': annotations}}}


async def _send(response: aiohttp.web.StreamResponse, event: dict[str, Any]) -> None:
    await response.write(json.dumps(event).encode() + b'\n')


async def stream(raw: aiohttp.web.BaseRequest, store: Store, query: WatchQuery, render: Render,
                 initial: list[dict[str, Any]] | None, position: int, end_bookmark: dict[str, Any] | None,
                 timeout_s: float | None, is_closing: Callable[[], bool],
                 is_dropped: Callable[[], bool] = lambda: False) -> aiohttp.web.StreamResponse:
    """Serve one watch: `initial` objects as ADDED, then `end_bookmark`, then events from `position`.

    `is_dropped` (fault injection) cuts the connection mid-stream, without the end of the chunked
    body, as a failing API server or proxy would."""
    response = aiohttp.web.StreamResponse(headers={'Content-Type': 'application/json'})
    await response.prepare(raw)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s if timeout_s else None
    try:
        for obj in initial or []:
            await _send(response, {'type': 'ADDED', 'object': render(obj)})
        if end_bookmark:
            await _send(response, end_bookmark)
        while True:
            if is_dropped():
                if raw.transport is not None:
                    raw.transport.close()  # NOTE: no write_eof: the client sees a broken stream
                return response
            # Deliver what was written before deciding to stop: a shutdown right after a write
            # must not swallow its event.
            while position < len(store.events):
                seen = translate(store.events[position], query)
                position += 1
                if seen:
                    await _send(response, {'type': seen[0], 'object': render(seen[1])})
            remaining_s = deadline - loop.time() if deadline is not None else _POLL_S
            client_gone = raw.transport is None or raw.transport.is_closing()
            if remaining_s <= 0 or client_gone or is_closing():
                break
            await store.wait(min(_POLL_S, remaining_s))
        await response.write_eof()
    except ConnectionError:
        pass  # the client went away: that ends a watch
    return response
