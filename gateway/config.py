"""GatewayConfig: every flag of `python -m gateway`, checked once at the door.

Owns the command line and its defaults, written once: each flag is a field
(scoringfleet_contract.flags); a bad flag is a clear message and exit status 2
(argparse's convention). Nothing here touches the network.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args
from urllib.parse import urlsplit

from gateway.finish import DEFAULT_RECOMPUTE_CHARGE
from scoringfleet_contract.facts import (
    API_KEY_ENV,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_REQUEST_BYTES,
    api_key_problem,
)
from scoringfleet_contract.flags import add_flags, config_fields, flag

Policy = Literal["power_of_two", "round_robin", "cache_aware"]
POLICIES = get_args(Policy)
DEFAULT_MAX_CONNECTIONS = 4096
# cache_aware routes by expected finish (gateway.finish); SGLang's request-count balance thresholds
# are no longer used: their flags are still accepted (a command line that names them still starts),
# with their old defaults. Then the query -> workers map's bound.
DEFAULT_BALANCE_ABS = 32
DEFAULT_BALANCE_REL = 1.5
NOT_USED = "not used: cache_aware routes by expected finish (docs/gateway.md); accepted for old command lines"
DEFAULT_MAX_QUERIES = 65536  # ~250 bytes each: ~16 MiB at most
DEFAULT_FLEET = "default"  # the one fleet of --worker-urls


@dataclass(frozen=True)
class FleetSource:
    """One fleet as the command line gives it: its workers (urls; None: discovered by its name)
    and the models it serves before any worker says."""

    name: str
    urls: tuple[str, ...] | None
    models: tuple[str, ...] = ()


def check_url(option: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{option}: {url!r} is not an http(s)://host:port URL")


def parse_fleets(worker_urls: tuple[str, ...], fleets: tuple[str, ...],
                 fleet_models: tuple[str, ...]) -> tuple[FleetSource, ...]:
    """--worker-urls, --fleet and --fleet-model -> the fleets in --fleet order; ValueError with
    the flag's name on anything wrong."""
    if bool(worker_urls) == bool(fleets):
        raise ValueError("give exactly one of --worker-urls or --fleet")
    sources: dict[str, tuple[str, ...] | None] = {DEFAULT_FLEET: worker_urls} if worker_urls else {}
    for given in fleets:
        name, has_urls, urls = given.partition("=")
        if not name or name in sources:
            raise ValueError(f"--fleet: {given!r}: {'a name is required' if not name else 'that name twice'}")
        sources[name] = tuple(url.rstrip("/") for url in urls.split(",")) if has_urls else None
        if has_urls and not any(sources[name]):
            raise ValueError(f"--fleet: {given!r} names no URL")
    for url in (url for urls in sources.values() for url in urls or ()):
        check_url("--worker-urls" if worker_urls else "--fleet", url)
    models: dict[str, tuple[str, ...]] = {}
    for given in fleet_models:
        name, _, names = given.partition("=")
        if name not in sources or not all(names.split(",")):
            raise ValueError(f"--fleet-model: {given!r} is not NAME=MODEL[,MODEL...] for a fleet "
                             f"given ({', '.join(sources)})")
        models[name] = models.get(name, ()) + tuple(names.split(","))
    return tuple(FleetSource(name, urls, models.get(name, ())) for name, urls in sources.items())


@dataclass(frozen=True)
class GatewayConfig:
    """Times are seconds. Exactly one of worker_urls or fleet says where the workers come from."""

    worker_urls: tuple[str, ...] = field(default=(), metadata=flag(
        f"static workers: one fleet named {DEFAULT_FLEET!r}", metavar="URL"))
    fleet: tuple[str, ...] = field(default=(), metadata=flag(
        "NAME: discover this ScoringFleet's ready pods (Kubernetes watch); NAME=URL[,URL...]: a static "
        "fleet. Repeatable: a request goes to the fleet that serves its model (none named: the first)",
        metavar="NAME[=URL,...]", action="append", nargs=None, default=None))
    fleet_model: tuple[str, ...] = field(default=(), metadata=flag(
        "NAME=MODEL[,MODEL...]: models fleet NAME serves, known before any of its workers answers "
        "(a fleet at zero is routable); its workers' /v1/models add to them. Repeatable",
        metavar="NAME=MODEL[,...]", action="append", nargs=None, default=None))
    namespace: str = field(default="default", metadata=flag("the fleets' namespace (with --fleet NAME)"))
    host: str = field(default="127.0.0.1", metadata=flag("listen address (0.0.0.0 in a pod)"))
    port: int = 30080
    policy: Policy = field(default="power_of_two", metadata=flag(
        "cache_aware: a query's requests go to the worker that holds it (docs/gateway.md)"))
    load_interval_s: float = field(default=0.05, metadata=flag("seconds between /get_load polls"))
    queue_timeout_s: float = field(default=30.0, metadata=flag(
        "seconds a request may wait for a ready worker before 503"))
    max_waiting_requests: int = field(default=1024, metadata=flag("beyond this, 503 at once"))
    request_timeout_s: float = field(default=120.0, metadata=flag("seconds for one upstream attempt"))
    api_key: str | None = field(default=None, repr=False, metadata=flag(  # never in a log line or traceback
        f"required as 'Authorization: Bearer <key>' and sent to the workers (default: the env var "
        f"{API_KEY_ENV}; this flag wins; a key on a command line is visible to all)"))
    max_request_bytes: int = field(default=DEFAULT_MAX_REQUEST_BYTES, metadata=flag(
        "a larger body is a 413 at the door (default: the server's limit, 8 MiB)"))
    header_timeout_s: float = field(default=DEFAULT_HEADER_TIMEOUT_S, metadata=flag(
        "seconds a connection may take to send a complete request head, from its opening or its last "
        "answer (also the idle keep-alive time); then it is closed"))
    max_connections: int = field(default=DEFAULT_MAX_CONNECTIONS, metadata=flag(
        "open client connections; a new one beyond this gets 503 and is closed"))
    access_log_all: bool = field(default=False, metadata=flag(  # False: no line for probes, /get_load, /metrics
        "an access-log line for every request, also probes and /metrics scrapes"))
    recompute_charge: float = field(default=DEFAULT_RECOMPUTE_CHARGE, metadata=flag(
        "cache_aware: a worker that would compute again a query another worker holds is charged this "
        "many times the query's time on top of its expected finish (0: the request's finish alone)"))
    balance_abs_threshold: int = field(default=DEFAULT_BALANCE_ABS, metadata=flag(NOT_USED))
    balance_rel_threshold: float = field(default=DEFAULT_BALANCE_REL, metadata=flag(NOT_USED))
    max_tracked_queries: int = field(default=DEFAULT_MAX_QUERIES, metadata=flag(
        "cache_aware: queries remembered with their workers (least recently routed out first)"))

    def __post_init__(self) -> None:
        parse_fleets(self.worker_urls, self.fleet, self.fleet_model)  # ValueError with the flag's name
        if not 0 < self.port < 65536:
            raise ValueError(f"--port must be in 1..65535, got {self.port}")
        if self.policy not in get_args(Policy):
            raise ValueError(f"--policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if not self.recompute_charge >= 0:  # NaN too
            raise ValueError(f"--recompute-charge must be >= 0, got {self.recompute_charge}")
        for option, value in (("--load-interval", self.load_interval_s),
                              ("--request-timeout", self.request_timeout_s),
                              ("--header-timeout", self.header_timeout_s)):
            if value <= 0:
                raise ValueError(f"{option} must be > 0 seconds, got {value}")
        if self.queue_timeout_s < 0:
            raise ValueError(f"--queue-timeout must be >= 0 seconds, got {self.queue_timeout_s}")
        if self.max_waiting_requests < 0:
            raise ValueError(f"--max-waiting-requests must be >= 0, got {self.max_waiting_requests}")
        for option, count in (("--max-request-bytes", self.max_request_bytes),
                              ("--max-connections", self.max_connections),
                              ("--max-tracked-queries", self.max_tracked_queries)):
            if count < 1:
                raise ValueError(f"{option} must be >= 1, got {count}")
        if problem := api_key_problem(self.api_key):
            raise ValueError(problem)

    @property
    def fleets(self) -> tuple[FleetSource, ...]:
        """The fleets behind this gateway, in --fleet order (--worker-urls: one, `default`)."""
        return parse_fleets(self.worker_urls, self.fleet, self.fleet_model)

    @property
    def stale_after_s(self) -> float:
        """A worker whose last /get_load answer is older than this is not chosen."""
        # NOTE: a few intervals, but never under 0.5 s: a busy 2-core node delays a poll that long.
        return max(5 * self.load_interval_s, 0.5)

    @property
    def poll_timeout_s(self) -> float:
        return max(2 * self.stale_after_s, 1.0)


def build_parser() -> argparse.ArgumentParser:
    """Every field of GatewayConfig as a flag (scoringfleet_contract.flags), then --log-level."""
    parser = argparse.ArgumentParser(
        prog="python -m gateway",
        description="Fleet gateway: routes /v1/score to scoring servers by their /get_load.")
    add_flags(parser, GatewayConfig)
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                        help="info: workers' transitions and an access-log line per score request")
    return parser


def parse_args(argv: Sequence[str] | None = None,
               environ: Mapping[str, str] | None = None) -> tuple[GatewayConfig, str]:
    """Flags (and the API key's env var) -> (config, log level); exits with status 2 and a
    message on a bad flag."""
    parser = build_parser()
    args = parser.parse_args(argv)
    fields = config_fields(args, GatewayConfig)
    fields["worker_urls"] = tuple(url.rstrip("/") for url in fields["worker_urls"])
    fields["fleet"], fields["fleet_model"] = tuple(fields["fleet"] or ()), tuple(fields["fleet_model"] or ())
    if fields["api_key"] is None:  # an empty variable is no key
        fields["api_key"] = (os.environ if environ is None else environ).get(API_KEY_ENV) or None
    try:
        config = GatewayConfig(**fields)
    except ValueError as error:
        parser.error(str(error))
    return config, args.log_level
