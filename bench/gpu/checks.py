"""CUDA correctness before the load run: the server's ModelRunner on the device against a plain
float32 forward on the CPU (one forward per query+item, the whole sequence), on mixed lengths
across several requests in one batch, so the length-grouped layout and the shared query are both
exercised. float32 must agree within F32_TOLERANCE; bfloat16 within BF16_TOLERANCE of float32.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.offline import label_softmax, max_abs_diff, naive_scores
from bench.workload import ScoreBody
from server.model_loader import load_model
from server.model_runner import ModelRunner
from server.sequence import Request, ScoringOptions

F32_TOLERANCE = 1e-4   # any label probability, float32 on the device vs float32 on the CPU
# Label softmax (apply_softmax=true), bfloat16 vs float32: SmolLM2 on a CPU moved by up to 0.044
# (docs/performance.md); a bf16 forward that is wrong, not merely rounded, moves it far more.
BF16_TOLERANCE = 0.05
LABELS = (5, 17, 42)


@dataclass(frozen=True)
class Check:
    name: str
    max_abs_diff: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.max_abs_diff <= self.tolerance

    def __str__(self) -> str:
        verdict = "ok" if self.ok else "FAILED"
        return f"{self.name}: max abs diff {self.max_abs_diff:.2e} <= {self.tolerance:g}? {verdict}"


def mixed_requests(vocab_size: int, seed: int = 0) -> list[Request]:
    rng = random.Random(seed)

    def ids(low: int, high: int) -> tuple[int, ...]:
        return tuple(rng.randrange(2, vocab_size) for _ in range(rng.randint(low, high)))

    options = ScoringOptions(LABELS, apply_softmax=False)
    return [Request.create(ids(4, 40), [ids(2, 60) for _ in range(rng.randint(2, 5))], options)
            for _ in range(4)]


def reference_scores(model, requests: list[Request]) -> list[list[float]]:
    """Full-vocabulary label probabilities, one whole-sequence forward per item (bench.offline's
    naive loop), in the requests' item order."""
    return [row for request in requests
            for row in naive_scores(model, ScoreBody(request.prefix_ids,
                                                     tuple(seq.own_ids for seq in request.sequences),
                                                     request.options.label_token_ids))]


def runner_scores(folder: Path, device: torch.device, dtype: torch.dtype,
                  requests: list[Request]) -> list[list[float]]:
    """All requests' items in ONE ModelRunner.run, as the server batches them."""
    model, tokenizer = load_model(str(folder), device, dtype)
    runner = ModelRunner(model, tokenizer, device)
    result = runner.run([seq for request in requests for seq in request.sequences])
    return result.scores


def check_correctness(folder: Path, device: torch.device) -> list[Check]:
    """float32 on `device` vs the CPU reference; bfloat16 vs float32 on `device`."""
    reference_model, _ = load_model(str(folder), torch.device("cpu"), torch.float32)
    requests = mixed_requests(reference_model.config.vocab_size)
    reference = reference_scores(reference_model, requests)
    f32 = runner_scores(folder, device, torch.float32, requests)
    bf16 = runner_scores(folder, device, torch.bfloat16, requests)
    where = device.type
    return [
        Check(f"float32 {where} runner vs float32 CPU forward, label probabilities",
              max_abs_diff(f32, reference), F32_TOLERANCE),
        Check(f"float32 {where} runner vs float32 CPU forward, softmax over the labels",
              max_abs_diff(label_softmax(f32), label_softmax(reference)), F32_TOLERANCE),
        Check(f"bfloat16 vs float32 on {where}, softmax over the labels",
              max_abs_diff(label_softmax(bf16), label_softmax(f32)), BF16_TOLERANCE),
    ]
