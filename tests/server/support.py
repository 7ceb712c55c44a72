"""Test doubles and builders for the server tests: a tiny random Llama with a real tokenizer (for
the mechanics), a free fake runner (for scheduler/engine invariants), and a live uvicorn server.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from server.app import create_app
from server.config import ServerConfig
from server.connections import uvicorn_config
from server.drain import DrainingServer
from server.engine import Engine
from server.sequence import RunResult
from server.special_tokens import NO_SPECIAL_TOKENS, SpecialTokens

CORPUS = [
    "What is the capital of California? Answer Yes or No for each of the following options:",
    "Sacramento San Jose San Francisco Los Angeles Yes No apple banana fruit car red fast",
    "The quick brown fox jumps over the lazy dog. Is this a fruit? Answer:",
]


def build_tiny_model(folder: Path, bos: bool = False) -> Path:
    """Save a 2-layer random Llama and a small byte-level BPE tokenizer to `folder`; with `bos`,
    the tokenizer puts a <bos> in front of every text, as Llama 3's does."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from bench.gpu.model import save_tokenizer

    fast = save_tokenizer(folder, CORPUS, vocab_size=400, repeats=20)
    if bos:
        fast = with_bos(fast)
        fast.save_pretrained(folder)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, tie_word_embeddings=False,
                         bos_token_id=fast.bos_token_id)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def with_bos(fast):
    """A copy of a fast tokenizer with a new <bos> token that its post-processor puts in front of
    every text (Llama 3's TemplateProcessing), so tokenizer(text) starts with it."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer.from_str(fast.backend_tokenizer.to_str())
    backend.add_special_tokens(["<bos>"])
    bos_id = backend.token_to_id("<bos>")
    backend.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", bos_id)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<bos>",
                                   pad_token=fast.pad_token, eos_token=fast.eos_token)


@dataclass
class FakeRunner:
    """Costs nothing; scores are a function of the tokens. `gate` (if set) holds every forward
    until released, so tests can look at the scheduler mid-batch; `fail_when` makes run() raise."""

    vocab_size: int = 1000
    max_context_tokens: int = 512
    shares_query_in_forward: bool = False  # each row holds its query (the scheduler counts it per row)
    special_tokens: SpecialTokens = NO_SPECIAL_TOKENS  # adds nothing around a text
    gate: threading.Event | None = None
    fail_when: object = None  # callable(sequences) -> bool
    batches: list[int] = field(default_factory=list)  # sizes of the batches run
    kept: set[int] = field(default_factory=set)

    def tokenize(self, text: str) -> list[int]:
        return [ord(ch) % self.vocab_size for ch in text]

    def run(self, sequences) -> RunResult:
        if self.gate is not None:
            self.gate.wait(timeout=30)
        self.batches.append(len(sequences))
        if self.fail_when is not None and self.fail_when(sequences):
            raise RuntimeError("injected forward failure")
        scores = [[(sum(seq.own_ids) % 97 + label) / 1000 for label in seq.request.options.label_token_ids]
                  for seq in sequences]
        return RunResult(scores, 0)

    def keep_only(self, live_request_ids) -> None:
        self.kept = set(live_request_ids)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def live_server(config: ServerConfig, engine: Engine, reranker=None):
    """Serve create_app(config, engine, reranker) on 127.0.0.1 in a thread, with the uvicorn settings
    and server class of `python -m server` (signals stay with the main thread); yield its base URL."""
    server = DrainingServer(uvicorn_config(create_app(config, engine, reranker), config, "warning"),
                            engine, config.drain_timeout_s)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://{config.host}:{config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def run_async(coro):
    return asyncio.run(coro)


@dataclass
class SlowRunner(FakeRunner):
    """A FakeRunner whose every forward takes `delay_s` of wall time (a stand-in for a real model
    under load), so that requests pile up in waiting while a batch runs."""

    delay_s: float = 0.02

    def run(self, sequences) -> RunResult:
        time.sleep(self.delay_s)
        return super().run(sequences)


def cpu_config(**settings) -> ServerConfig:
    """A resolved ServerConfig for a fake runner (CPU defaults); `settings` are its fields."""
    return ServerConfig(**settings).resolve("cpu", "float32")


@contextlib.contextmanager
def serving(runner, reranker=None, **settings):
    """An Engine over `runner` behind a live uvicorn server on a free 127.0.0.1 port (with
    /v1/rerank when a `reranker` is given). Yields (base_url, engine); `settings` are ServerConfig
    fields."""
    config = cpu_config(port=free_port(), **settings)
    engine = Engine(config, runner)
    with live_server(config, engine, reranker) as url:
        yield url, engine


def wait_until(predicate, timeout_s: float = 5.0, interval_s: float = 0.01) -> None:
    """Poll `predicate` (bounded); AssertionError if it never holds within timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    raise AssertionError(f"condition not reached within {timeout_s} s")


def server_env() -> dict[str, str]:
    """The environment for a server subprocess. Never reach for the hub: a test model is a folder."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1"}


def wait_ready(process: subprocess.Popen, url: str, timeout_s: float = 60) -> None:
    """Poll readiness until 200 (bounded); fails at once if the process exits meanwhile."""
    def ready() -> bool:
        assert process.poll() is None, "the server exited during startup"
        try:
            return httpx.get(f"{url}/health_generate", timeout=1).status_code == 200
        except httpx.TransportError:
            return False
    wait_until(ready, timeout_s=timeout_s, interval_s=0.1)


def warnings_of(caplog) -> list[str]:
    """The WARNING-and-above messages (another test may have left a logger at INFO)."""
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
