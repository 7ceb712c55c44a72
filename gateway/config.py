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


@dataclass(frozen=True)
class GatewayConfig:
    """Times are seconds. Exactly one of worker_urls or fleet says where the workers come from."""

    worker_urls: tuple[str, ...] = field(default=(), metadata=flag("static workers", metavar="URL"))
    fleet: str | None = field(default=None, metadata=flag(
        "discover this ScoringFleet's ready pods (Kubernetes watch)"))
    namespace: str = field(default="default", metadata=flag("the fleet's namespace (with --fleet)"))
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
        if bool(self.worker_urls) == bool(self.fleet):
            raise ValueError("give exactly one of --worker-urls or --fleet")
        for url in self.worker_urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"--worker-urls: {url!r} is not an http(s)://host:port URL")
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
    if fields["api_key"] is None:  # an empty variable is no key
        fields["api_key"] = (os.environ if environ is None else environ).get(API_KEY_ENV) or None
    try:
        config = GatewayConfig(**fields)
    except ValueError as error:
        parser.error(str(error))
    return config, args.log_level
