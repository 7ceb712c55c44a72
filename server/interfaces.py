"""The two interfaces the server's parts meet by, declared once (typing.Protocol) and checked by
tests/server/test_interfaces.py against every implementation, so a misspelt or missing member is a
failing test, not a silent default.

- `Runner`: what the engine and the routes need of a model runner (ModelRunner, EncoderRunner, and
  the fakes that cost nothing: tests' FakeRunner, bench's FreeRunner).
- `ScoringService`: what the app, the drain and the entry point need of the engine: `Engine` (the
  model loaded) and `EngineStartup` (the same surface from the process's first second; what needs
  the model answers 503 while it loads).
Values only; no behaviour here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence as Seq

from server.classifier import Classifier
from server.config import ServerConfig
from server.inputs import InputLimits
from server.metrics import ServerMetrics
from server.rerank import Reranker
from server.scheduler import Load
from server.schemas import ScoreRequest
from server.sequence import RunResult, Sequence
from server.special_tokens import SpecialTokens


class Runner(Protocol):
    vocab_size: int
    max_context_tokens: int
    # True where every forward holds a request's query once (the scheduler's prefill budget then
    # counts it once); False where each row holds its own (a cross-encoder, the fakes).
    shares_query_in_forward: bool
    special_tokens: SpecialTokens  # what its tokenizer adds around a text (a BOS); none for the fakes

    def tokenize(self, text: str) -> list[int]: ...
    def run(self, sequences: Seq[Sequence]) -> RunResult: ...
    def keep_only(self, live_request_ids: set[int]) -> None: ...


@dataclass(frozen=True)
class ScoreResult:
    scores: list[list[float]]
    num_prompt_tokens: int


class ScoringService(Protocol):
    config: ServerConfig  # the effective one once loaded (what /get_server_info reports)
    metrics: ServerMetrics
    is_loading: bool
    load_failed: bool  # the model did not load: the process exits 2
    is_draining: bool

    # NOTE: these four raise ServiceUnavailable (503) while the model loads.
    @property
    def runner(self) -> Runner: ...
    @property
    def input_limits(self) -> InputLimits: ...
    @property
    def special_tokens(self) -> SpecialTokens: ...
    @property
    def reranker(self) -> Reranker | Classifier | None: ...  # the head the load chose, if any

    @property
    def is_ready(self) -> bool: ...
    def load(self) -> Load: ...
    async def score(self, body: ScoreRequest, adapter: str | None = None) -> ScoreResult: ...
    async def start(self) -> None: ...
    def begin_drain(self) -> None: ...
    async def stop(self) -> None: ...
