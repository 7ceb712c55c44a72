"""Which fleet serves a request's model: the names each fleet serves and the pure choice by them.

A fleet's served names are those given (`--fleet-model`, known before any worker answers, so a
fleet at zero is routable) and every id its workers list on GET /v1/models (adapters included),
kept after the workers go: a fleet scaled to zero still owns its names. ServedNames owns one
fleet's; resolve() picks a fleet for a model (pure); nothing here does I/O.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

MODEL_HEADER = "x-gateway-model-name"  # llm-d's: the body's model copied into a header


@dataclass(frozen=True)
class Listing:
    """One worker's GET /v1/models: every id, and those that are adapters (a `parent` set)."""

    ids: tuple[str, ...]
    adapters: frozenset[str] = frozenset()


def parse_listing(payload) -> Listing:
    """A /v1/models body (OpenAI's list; vLLM's `parent` marks an adapter) -> Listing; ValueError
    if it is not such a list."""
    entries = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("id"), str)
                                                for e in entries):
        raise ValueError("not a /v1/models list (data: [{id: ...}])")
    ids = tuple(dict.fromkeys(e["id"] for e in entries))
    return Listing(ids, frozenset(e["id"] for e in entries if e.get("parent")))


def requested_model(headers: Mapping[str, str], payload) -> str | None:
    """The model a request asks for: the header if present, else the body's `model`; None when
    neither names one (absent, null, "" or not a string: the worker judges a bad type)."""
    model = headers.get(MODEL_HEADER)
    if model is None and isinstance(payload, dict):
        model = payload.get("model")
    return model if isinstance(model, str) and model else None


class ServedNames:
    """One fleet's names in the order first known (given, then learned), and its adapters."""

    def __init__(self, given: Iterable[str] = ()) -> None:
        self._names: dict[str, None] = dict.fromkeys(given)
        self.adapters: set[str] = set()

    def learn(self, listing: Listing) -> None:
        self._names.update(dict.fromkeys(listing.ids))
        self.adapters |= listing.adapters

    def names(self) -> tuple[str, ...]:
        return tuple(self._names)

    def __contains__(self, name: str) -> bool:
        return name in self._names


@dataclass(frozen=True)
class Route:
    """Where a request's model goes: the fleet, the served name it resolved to (the metrics'
    `model` label: never a client's free text) and the adapter it names, if any."""

    fleet: str
    label: str
    adapter: str | None = None


def resolve(model: str | None, fleets: Sequence[tuple[str, ServedNames]]) -> Route | None:
    """The fleet for `model` among `fleets` (in --fleet order; the first that claims a name wins):

    none asked -> the first fleet; a served name or an adapter's own name -> its fleet;
    `base:adapter` (SGLang's form) -> the fleet of `base`; else, while some fleet knows no name
    at all (no --fleet-model, no worker listed yet), the first such fleet (its workers judge the
    model: one fleet behaves as before the gateway knew models); else None (unknown: a 404).
    """
    if model is None:
        name, served = fleets[0]
        return Route(name, next(iter(served.names()), ""))
    for name, served in fleets:
        if model in served:
            return Route(name, model, model if model in served.adapters else None)
    # rpartition, as the server splits it: a served name may hold ':' ("qwen3:8b"), an adapter's never does
    base, _, adapter = model.rpartition(":")
    for name, served in fleets:
        if adapter and base in served:
            return Route(name, base, adapter)
    unnamed = next((name for name, served in fleets if not served.names()), None)
    return Route(unnamed, "") if unnamed is not None else None


def unknown_model(model: str, fleets: Sequence[tuple[str, ServedNames]]) -> str:
    """The 404's message: the model asked for and every name served."""
    names = list(dict.fromkeys(n for _, served in fleets for n in served.names()))
    return f"model {model!r} is not served here; served models: {', '.join(names)}"
