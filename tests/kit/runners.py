"""Fakes of the model runner (server.interfaces.Runner) for the scheduler, engine, gateway and
operator tests: they cost nothing, or a set wall time per forward."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from server.sequence import RunResult
from server.special_tokens import NO_SPECIAL_TOKENS, SpecialTokens


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


@dataclass
class SlowRunner(FakeRunner):
    """A FakeRunner whose every forward takes `delay_s` of wall time (a stand-in for a real model
    under load), so that requests pile up in waiting while a batch runs."""

    delay_s: float = 0.02

    def run(self, sequences) -> RunResult:
        time.sleep(self.delay_s)
        return super().run(sequences)
