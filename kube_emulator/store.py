"""The emulator's memory: objects by resource, one cluster-wide resourceVersion counter, an event log.

Owns: storage, the counter (bumped on every write) and the append-only event log that watches replay
from a resourceVersion. Not owned: what a write means (objects.py) or HTTP (emulator.py). Used only from
the emulator's event loop thread, so it needs no lock; waiters are futures of that loop.
"""
import asyncio
import bisect
import copy
from dataclasses import dataclass
from typing import Any

GroupPlural = tuple[str, str]  # storage is per (group, plural): every served version sees the same objects


@dataclass(frozen=True)
class Event:
    """One write as a watch sees it; `old` is the previous state for MODIFIED (selector transitions)."""
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    resource: GroupPlural
    obj: dict[str, Any]
    old: dict[str, Any] | None = None


class Store:
    def __init__(self) -> None:
        self._objects: dict[GroupPlural, dict[tuple[str | None, str], dict[str, Any]]] = {}
        self._rv = 0
        self.events: list[Event] = []
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, resource: GroupPlural, namespace: str | None, name: str) -> dict[str, Any] | None:
        obj = self._objects.get(resource, {}).get((namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def objects(self, resource: GroupPlural, namespace: str | None = None) -> list[dict[str, Any]]:
        """Objects of a resource, in one namespace or (namespace None) all of them, by name."""
        items = self._objects.get(resource, {})
        return [copy.deepcopy(obj) for (ns, _), obj in sorted(items.items(), key=lambda kv: (kv[0][0] or '', kv[0][1]))
                if namespace is None or ns == namespace]

    def resources(self) -> list[GroupPlural]:
        return [resource for resource, items in self._objects.items() if items]

    def put(self, resource: GroupPlural, obj: dict[str, Any], event_type: str,
            old: dict[str, Any] | None = None) -> dict[str, Any]:
        """Store obj under a fresh resourceVersion and log the event; returns the stored copy."""
        stored = self._stamp(obj)
        meta = stored['metadata']
        self._objects.setdefault(resource, {})[(meta.get('namespace'), meta['name'])] = stored
        self._log(Event(self._rv, event_type, resource, copy.deepcopy(stored), old))
        return copy.deepcopy(stored)

    def remove(self, resource: GroupPlural, obj: dict[str, Any]) -> dict[str, Any]:
        """Forget obj; the DELETED event carries its last state under a fresh resourceVersion."""
        meta = obj['metadata']
        self._objects.get(resource, {}).pop((meta.get('namespace'), meta['name']), None)
        final = self._stamp(obj)
        self._log(Event(self._rv, 'DELETED', resource, copy.deepcopy(final)))
        return final

    def events_after(self, rv: int) -> int:
        """The index in `events` of the first event newer than rv."""
        return bisect.bisect_right([event.rv for event in self.events], rv)

    async def wait(self, timeout_s: float) -> None:
        """Return after the next write, or after timeout_s."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout=timeout_s)
        except TimeoutError:
            pass
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def wake_all(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self._rv += 1
        stored = copy.deepcopy(obj)
        stored['metadata']['resourceVersion'] = str(self._rv)
        return stored

    def _log(self, event: Event) -> None:
        self.events.append(event)
        self.wake_all()
