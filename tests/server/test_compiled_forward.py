"""compiled_forward: which shapes the one compiled graph covers, and (slow: a compile takes
minutes on a small CPU) that the compiled runner scores exactly as the eager one in float32, on
batch shapes it never saw, without compiling again."""
from __future__ import annotations

import random

import pytest
import torch

from server.compiled_forward import WARM_UP_SHAPES, compilable
from server.model_loader import load_model
from server.model_runner import ModelRunner
from server.sequence import Request, ScoringOptions

LABELS = ScoringOptions((5, 17, 42), False)


@pytest.mark.parametrize(("rows", "own", "slots", "expected"), [
    (2, 2, 2, True), (10, 180, 120, True),
    (1, 180, 120, False),   # one row: torch specializes size 1
    (10, 1, 120, False),    # one-token items
    (10, 180, 1, False),    # one prefix slot
    (10, 180, 0, False),    # no query at all: no batch cache
])
def test_compilable_shapes(rows, own, slots, expected):
    assert compilable(rows, own, slots) is expected


def test_warm_up_shapes_are_distinct_and_compilable():
    for shape in WARM_UP_SHAPES:
        assert compilable(*shape) and len(set(shape)) == len(shape)


def random_requests(rng: random.Random, vocab: int) -> list[Request]:
    def ids(low: int, high: int) -> tuple[int, ...]:
        return tuple(rng.randrange(vocab) for _ in range(rng.randint(low, high)))
    return [Request.create(ids(0, 30), [ids(1, 40) for _ in range(rng.randint(1, 6))], LABELS)
            for _ in range(rng.randint(1, 3))]


@pytest.mark.slow
def test_compiled_runner_scores_as_eager_without_recompiling(tiny_model_dir):
    model, tokenizer = load_model(str(tiny_model_dir), torch.device("cpu"), torch.float32)
    eager, compiled = ModelRunner(model, tokenizer), ModelRunner(model, tokenizer)
    assert compiled.compile() > 0 and compiled.is_compiled and not eager.is_compiled
    rng = random.Random(0)
    shapes = set()
    for _ in range(6):  # 1-row, 1-token and query-less batches among them: those run eager
        sequences = [seq for request in random_requests(rng, eager.vocab_size)
                     for seq in request.sequences]
        expected, got = eager.run(sequences).scores, compiled.run(sequences).scores
        for row, expected_row in zip(got, expected):
            assert row == pytest.approx(expected_row, abs=1e-6)
        eager.keep_only(())
        compiled.keep_only(())
        shapes.add(len(sequences))
    assert compiled._items_forward.num_eager_fallbacks == 0
    assert len(shapes) > 2  # the graph served batch shapes the warm-up never ran
