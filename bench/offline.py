"""In-process measurements, no HTTP and no scheduler: the naive loop a user writes first (one full
transformers forward per query+item, logits at every position), the plain batched forward a user
writes next (one transformers forward over query+item for all of a request's items, logits at the
last position only: the baseline the query sharing must beat), the same compiled, and the project's offline batched
path (server.model_runner.ModelRunner.run on one request's items at a time, query computed once).
All return the label probabilities too, so the paths can be checked against each other.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch

from bench.workload import ScoreBody
from server.model_runner import ModelRunner
from server.sequence import Request, ScoringOptions

Scores = list[list[float]]  # per item of every body, in order: one probability per label


@dataclass(frozen=True)
class Measurement:
    items_per_s: float
    scores: Scores


def naive_scores(model, body: ScoreBody) -> Scores:
    """One forward per item over query+item; the whole sequence goes through the LM head."""
    labels = torch.tensor(body.label_token_ids)
    scores = []
    with torch.no_grad():
        for item in body.items:
            input_ids = torch.tensor([body.query + item])
            logits = model(input_ids).logits[:, -1].float()
            scores.append(torch.softmax(logits, dim=-1)[0, labels].tolist())
    return scores


def plain_batched_scores(model, body: ScoreBody) -> Scores:
    """One transformers forward over [items, query+item] (no padding: the items of a body have
    one length), the LM head at the last position only (`logits_to_keep=1`): query+item tokens
    computed per item, the query not shared."""
    lengths = {len(item) for item in body.items}
    if len(lengths) != 1:
        raise ValueError(f"the plain batched forward needs items of one length, got {lengths}")
    labels = torch.tensor(body.label_token_ids)
    device = next(model.parameters()).device
    with torch.inference_mode():
        input_ids = torch.tensor([body.query + item for item in body.items], device=device)
        logits = model(input_ids, logits_to_keep=1).logits[:, -1].float().cpu()
    return torch.softmax(logits, dim=-1)[:, labels].tolist()


def compiled_plain(model, body: ScoreBody, freeze: bool):
    """The plain batched forward as a user would compile it: torch.compile of the whole model,
    static shapes (every body of a run has one shape), with inductor's freezing (weights folded
    into the graph as constants, prepacked) when `freeze`; compiled here, on `body`."""
    compiled = torch.compile(model, dynamic=False)
    with torch._inductor.config.patch(freezing=freeze):  # read when the first call compiles
        plain_batched_scores(compiled, body)
    return compiled


def runner_scores(runner: ModelRunner, body: ScoreBody) -> Scores:
    """One request through ModelRunner.run, as the engine would run it alone in a batch."""
    request = Request.create(body.query, list(body.items),
                             ScoringOptions(body.label_token_ids, apply_softmax=False))
    result = runner.run(request.sequences)
    runner.keep_only(())  # the request is finished: drop its query cache, as the engine does
    return result.scores


def measure(score_one, bodies: list[ScoreBody]) -> Measurement:
    """items/s of score_one over all bodies (call warm_up first: the first forward is slow)."""
    start = time.perf_counter()
    scores = [row for body in bodies for row in score_one(body)]
    elapsed = time.perf_counter() - start
    return Measurement(len(scores) / elapsed, scores)


def measure_naive(model, bodies: list[ScoreBody]) -> Measurement:
    return measure(lambda body: naive_scores(model, body), bodies)


def measure_plain_batched(model, bodies: list[ScoreBody]) -> Measurement:
    return measure(lambda body: plain_batched_scores(model, body), bodies)


def measure_runner(runner: ModelRunner, bodies: list[ScoreBody]) -> Measurement:
    return measure(lambda body: runner_scores(runner, body), bodies)


def load_runner(dtype: torch.dtype, model_path: str = "default") -> ModelRunner:
    from server.model_loader import load_model

    model, tokenizer = load_model(model_path, torch.device("cpu"), dtype)
    return ModelRunner(model, tokenizer, "cpu")


def with_dtype(runner: ModelRunner, dtype: torch.dtype) -> ModelRunner:
    """A second runner over a copy of the same weights cast to `dtype`, as if loaded in `dtype`
    (saves a second load: ~6 s for the default GGUF).

    NOTE: parameters only. model.to(dtype) would also round the float32 buffers (the rotary
    inv_freq), which from_pretrained(dtype=...) keeps: that alone moved label probabilities by
    2.4e-5, as much as bf16 weights do."""
    model = copy.deepcopy(runner.model)
    for parameter in model.parameters():
        parameter.data = parameter.data.to(dtype)
    return ModelRunner(model, runner.tokenizer, runner.device)


def label_softmax(scores: Scores) -> Scores:
    """The apply_softmax=true view of full-vocabulary label probabilities: each row over its own
    sum (softmax over the label logits only; exact, since the shared normalizer cancels)."""
    return [[p / sum(row) for p in row] if sum(row) > 0 else row for row in scores]


def max_abs_diff(a: Scores, b: Scores) -> float:
    if len(a) != len(b):
        raise ValueError(f"score lists differ in length: {len(a)} vs {len(b)}")
    return max((abs(x - y) for row_a, row_b in zip(a, b) for x, y in zip(row_a, row_b)),
               default=0.0)
