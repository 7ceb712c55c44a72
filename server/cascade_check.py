"""A start-time check of the shared-prefix attention where this project's tests do not run: on a
GPU (CUDA's log-sum-exp kernel is written to torch's documented contract and checked by the gpu
tests and `python -m bench.gpu` only where a GPU exists). A synthetic batch of two queries is
scored through the cascade and through the masked layout; if their label log-probabilities
disagree beyond the dtype's rounding, the runner keeps to the masked layout (one warning): slower,
never wrong.
"""
from __future__ import annotations

import logging
import math

import torch

from server.classifier_support import is_sequence_classifier
from server.sequence import Request, ScoringOptions

log = logging.getLogger("server")

MAX_LABELS = 32  # label ids (classes, for a classifier) compared: a wrong attention moves some by nats
# Largest |log p(cascade) - log p(masked)| accepted: float32 agrees to rounding, half types to a
# few hundredths of a nat (measured on CPU in bfloat16: ~1e-2).
TOLERANCE_NATS = {torch.float32: 1e-3, torch.bfloat16: 0.25, torch.float16: 0.1}


def keep_cascade_if_it_agrees(runner) -> float | None:
    """Score the check batch both ways on a runner whose forwards take the cascade; turn the
    cascade off if they disagree. Returns the largest disagreement in nats (None: not checked)."""
    if not runner.shares_query_in_forward:
        return None
    labels = tuple(range(min(MAX_LABELS, _num_outputs(runner.model.config, runner.vocab_size))))
    sequences = [seq for request in _check_requests(runner.vocab_size, labels) for seq in request.sequences]
    cascade = runner.run(sequences).scores
    runner.use_cascade = False
    masked = runner.run(sequences).scores
    runner.keep_only(())
    runner.query_cache.clear()  # synthetic queries: no client sends them
    worst = max(abs(math.log(max(a, 1e-30)) - math.log(max(b, 1e-30)))
                for row_a, row_b in zip(cascade, masked) for a, b in zip(row_a, row_b))
    if worst <= TOLERANCE_NATS.get(runner.dtype, 0.25):
        runner.use_cascade = True
        return worst
    log.warning("the shared-prefix attention disagrees with the masked layout on %s by %.3g nats: "
                "serving with the masked layout (each row holds its query)", runner.device, worst)
    return worst


def _num_outputs(model_config, vocab_size: int) -> int:
    """What a label id indexes: a classifier's classes, else the vocabulary."""
    return model_config.num_labels if is_sequence_classifier(model_config) else vocab_size


def _check_requests(vocab_size: int, labels: tuple[int, ...]) -> list[Request]:
    """Two queries of different lengths, items of different lengths under each; scores are the
    labels' softmax (a classifier's activation): probabilities, compared as log-probabilities."""
    options = ScoringOptions(labels, True)

    def ids(start: int, length: int) -> tuple[int, ...]:
        return tuple((start + 7 * i) % vocab_size for i in range(length))
    return [Request.create(ids(100, 37), [ids(300 + k, 11 + 5 * k) for k in range(3)], options),
            Request.create(ids(900, 23), [ids(700 + k, 19 - 4 * k) for k in range(2)], options)]
