"""Fleet: one fleet behind the gateway with its own worker registry, poller, waiting room, router
(and so its own policy object) and served names; Fleets: all of them in --fleet order, and which
one a request's model goes to.

A fleet at zero holds only its own requests in its own waiting room (the demand that wakes it,
scoringfleet_gateway_waiting_requests{fleet=NAME}); the other fleets' requests never wait on it.
Discovery (a static list or the pod watch) is the app's: it calls set_rotation().
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import aiohttp

from gateway.config import FleetSource, GatewayConfig
from gateway.metrics import GatewayMetrics
from gateway.poller import Poller
from gateway.routing import Router
from gateway.served import Route, ServedNames, resolve, unknown_model
from gateway.transitions import TransitionLog
from gateway.waiting import WaitingRoom
from gateway.workers import WorkerRegistry


@dataclass
class Fleet:
    source: FleetSource
    names: ServedNames
    registry: WorkerRegistry
    waiting: WaitingRoom
    poller: Poller
    router: Router

    @property
    def name(self) -> str:
        return self.source.name

    def set_rotation(self, urls) -> None:
        """The fleet's workers are now exactly `urls` (discovery's or the static list)."""
        _, removed = self.registry.set_urls(urls)
        self.router.forget_workers(removed)
        self.poller.sync()
        self.waiting.notify()


def build_fleet(source: FleetSource, config: GatewayConfig, session: aiohttp.ClientSession,
                metrics: GatewayMetrics) -> Fleet:
    """A fleet's parts, wired: the registry tells the router of restarts, the poller wakes its
    waiting room and teaches its names; its gauges join the gateway's metrics."""
    key_required = config.api_key is not None
    names = ServedNames(source.models)
    registry = WorkerRegistry(config.stale_after_s, key_required=key_required,
                              on_change=TransitionLog(config.stale_after_s, key_required).observe)
    waiting = WaitingRoom(config.max_waiting_requests)
    poller = Poller(registry, session, config.load_interval_s, config.poll_timeout_s,
                    waiting.notify, config.api_key, on_models=names.learn)
    router = Router(config, registry, waiting, metrics, session)
    registry.on_new_process = lambda url: router.forget_workers([url])
    metrics.add_fleet(source.name, waiting, registry)
    return Fleet(source, names, registry, waiting, poller, router)


class Fleets:
    """The gateway's fleets in --fleet order (the first takes a request that names no model)."""

    def __init__(self, fleets: list[Fleet]) -> None:
        self._fleets = {fleet.name: fleet for fleet in fleets}

    def __iter__(self) -> Iterator[Fleet]:
        return iter(self._fleets.values())

    def route(self, model: str | None) -> tuple[Fleet, Route] | None:
        """The fleet for `model` (served.resolve), with how it resolved; None: no fleet serves it."""
        route = resolve(model, [(fleet.name, fleet.names) for fleet in self])
        return (self._fleets[route.fleet], route) if route is not None else None

    def unknown(self, model: str) -> str:
        return unknown_model(model, [(fleet.name, fleet.names) for fleet in self])

    def first(self) -> Fleet:
        return next(iter(self))
