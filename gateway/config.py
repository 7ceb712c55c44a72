"""GatewayConfig: every flag of `python -m gateway`, checked once at the door.

Owns the command line and its defaults; a bad flag is a clear message and exit status 2
(argparse's convention). Nothing here touches the network.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

Policy = Literal["power_of_two", "round_robin", "cache_aware"]
POLICIES = ("power_of_two", "round_robin", "cache_aware")
# The API key's env var (the operator sets it from a Secret); the same name as the server's.
API_KEY_ENV = "SCORINGFLEET_API_KEY"
DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024  # the server's --max-request-bytes default
DEFAULT_HEADER_TIMEOUT_S = 5.0               # the server's --header-timeout default
DEFAULT_MAX_CONNECTIONS = 4096
# cache_aware: SGLang router's defaults (--balance-abs-threshold 64, --balance-rel-threshold 1.5),
# here in sequences, the unit of the workers' /get_load; the query -> workers map's bound.
DEFAULT_BALANCE_ABS = 64
DEFAULT_BALANCE_REL = 1.5
DEFAULT_MAX_QUERIES = 65536  # ~250 bytes each: ~16 MiB at most


@dataclass(frozen=True)
class GatewayConfig:
    """Times are seconds. Exactly one of worker_urls or fleet says where the workers come from."""

    worker_urls: tuple[str, ...] = ()
    fleet: str | None = None
    namespace: str = "default"
    host: str = "127.0.0.1"
    port: int = 30080
    policy: Policy = "power_of_two"
    load_interval_s: float = 0.05
    queue_timeout_s: float = 30.0
    max_waiting_requests: int = 1024
    request_timeout_s: float = 120.0
    api_key: str | None = field(default=None, repr=False)  # never in a log line or traceback
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    access_log_all: bool = False  # False: no access-log line for probes, /get_load, /metrics
    balance_abs_threshold: int = DEFAULT_BALANCE_ABS    # cache_aware: sequences
    balance_rel_threshold: float = DEFAULT_BALANCE_REL  # cache_aware: a ratio
    max_tracked_queries: int = DEFAULT_MAX_QUERIES      # cache_aware: the query -> workers map

    def __post_init__(self) -> None:
        if bool(self.worker_urls) == bool(self.fleet):
            raise ValueError("give exactly one of --worker-urls or --fleet")
        for url in self.worker_urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"--worker-urls: {url!r} is not an http(s)://host:port URL")
        if not 0 < self.port < 65536:
            raise ValueError(f"--port must be in 1..65535, got {self.port}")
        if self.policy not in POLICIES:
            raise ValueError(f"--policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if self.balance_abs_threshold < 0 or self.balance_rel_threshold < 1:
            raise ValueError("--balance-abs-threshold must be >= 0 and --balance-rel-threshold >= 1, "
                             f"got {self.balance_abs_threshold} and {self.balance_rel_threshold}")
        for flag, value in (("--load-interval", self.load_interval_s),
                            ("--request-timeout", self.request_timeout_s),
                            ("--header-timeout", self.header_timeout_s)):
            if value <= 0:
                raise ValueError(f"{flag} must be > 0 seconds, got {value}")
        if self.queue_timeout_s < 0:
            raise ValueError(f"--queue-timeout must be >= 0 seconds, got {self.queue_timeout_s}")
        if self.max_waiting_requests < 0:
            raise ValueError(f"--max-waiting-requests must be >= 0, got {self.max_waiting_requests}")
        for flag, count in (("--max-request-bytes", self.max_request_bytes),
                            ("--max-connections", self.max_connections),
                            ("--max-tracked-queries", self.max_tracked_queries)):
            if count < 1:
                raise ValueError(f"{flag} must be >= 1, got {count}")
        if self.api_key is not None and (not self.api_key or self.api_key != self.api_key.strip()):
            # A client's token is compared stripped, and the key goes into the workers' header:
            # such a key would refuse every client. As the server's check; never the key itself.
            raise ValueError("the API key must not be empty nor begin or end with whitespace "
                             "(a Secret's value with a trailing newline?)")

    @property
    def stale_after_s(self) -> float:
        """A worker whose last /get_load answer is older than this is not chosen."""
        # NOTE: a few intervals, but never under 0.5 s: a busy 2-core node delays a poll that long.
        return max(5 * self.load_interval_s, 0.5)

    @property
    def poll_timeout_s(self) -> float:
        return max(2 * self.stale_after_s, 1.0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gateway",
        description="Fleet gateway: routes /v1/score to scoring servers by their /get_load.")
    add = parser.add_argument
    add("--worker-urls", nargs="+", default=[], metavar="URL", help="static workers")
    add("--fleet", default=None, help="discover this ScoringFleet's ready pods (Kubernetes watch)")
    add("--namespace", default="default", help="the fleet's namespace (with --fleet)")
    add("--host", default="127.0.0.1", help="listen address (0.0.0.0 in a pod)")
    add("--port", type=int, default=30080)
    add("--policy", default="power_of_two", choices=POLICIES,
        help="cache_aware: a query's requests go to the worker that holds it (docs/gateway.md)")
    add("--balance-abs-threshold", type=int, default=DEFAULT_BALANCE_ABS,
        help="cache_aware: a query's worker is passed over (power of two instead) when its load "
             "exceeds the lightest worker's by more than this many sequences, and ...")
    add("--balance-rel-threshold", type=float, default=DEFAULT_BALANCE_REL,
        help="... is more than this many times the lightest worker's load")
    add("--max-tracked-queries", type=int, default=DEFAULT_MAX_QUERIES,
        help="cache_aware: queries remembered with their workers (least recently routed out first)")
    add("--load-interval", type=float, default=0.05, help="seconds between /get_load polls")
    add("--queue-timeout", type=float, default=30.0,
        help="seconds a request may wait for a ready worker before 503")
    add("--max-waiting-requests", type=int, default=1024, help="beyond this, 503 at once")
    add("--request-timeout", type=float, default=120.0, help="seconds for one upstream attempt")
    add("--api-key", default=None,
        help=f"required as 'Authorization: Bearer <key>' and sent to the workers (default: the "
             f"env var {API_KEY_ENV}; this flag wins; a key on a command line is visible to all)")
    add("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES,
        help="a larger body is a 413 at the door (default: the server's limit, 8 MiB)")
    add("--header-timeout", type=float, default=DEFAULT_HEADER_TIMEOUT_S,
        help="seconds a connection may take to send a complete request head, from its opening "
             "or its last answer (also the idle keep-alive time); then it is closed")
    add("--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS,
        help="open client connections; a new one beyond this gets 503 and is closed")
    add("--log-level", default="info", choices=["debug", "info", "warning", "error"],
        help="info: workers' transitions and an access-log line per score request")
    add("--access-log-all", action="store_true",
        help="an access-log line for every request, also probes and /metrics scrapes")
    return parser


def parse_args(argv: Sequence[str] | None = None,
               environ: Mapping[str, str] | None = None) -> tuple[GatewayConfig, str]:
    """Flags (and the API key's env var) -> (config, log level); exits with status 2 and a
    message on a bad flag."""
    parser = build_parser()
    args = parser.parse_args(argv)
    environ = os.environ if environ is None else environ
    try:
        config = GatewayConfig(
            worker_urls=tuple(url.rstrip("/") for url in args.worker_urls), fleet=args.fleet,
            namespace=args.namespace, host=args.host, port=args.port, policy=args.policy,
            load_interval_s=args.load_interval, queue_timeout_s=args.queue_timeout,
            max_waiting_requests=args.max_waiting_requests,
            request_timeout_s=args.request_timeout,
            api_key=args.api_key if args.api_key is not None else environ.get(API_KEY_ENV) or None,
            max_request_bytes=args.max_request_bytes, header_timeout_s=args.header_timeout,
            max_connections=args.max_connections, access_log_all=args.access_log_all,
            balance_abs_threshold=args.balance_abs_threshold,
            balance_rel_threshold=args.balance_rel_threshold,
            max_tracked_queries=args.max_tracked_queries)
    except ValueError as error:
        parser.error(str(error))
    return config, args.log_level
