"""compiled_forward: which shapes the one compiled graph covers, what of the decoder it covers, and
(slow: a compile takes a minute on a small CPU) that the compiled runner scores exactly as the
eager one in float32, on batch shapes it never saw, without compiling again: in the shared-prefix
layout (one decoder layer's graph around the opaque cascade attention op; with frozen weights, the
whole decoder's), and in the masked layout (a model whose sliding window cuts its sequences)."""
from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Iterator

import pytest
import torch
from torch._dynamo.utils import counters
from transformers import AutoTokenizer

from server.compiled_forward import (
    CASCADE,
    MASKED,
    ONE_LAYER,
    WARM_UP_SHAPES,
    WHOLE_DECODER,
    ItemsForward,
    compilable,
    graph_scope,
)
from server.model_loader import load_model
from server.model_runner import ModelRunner
from server.sequence import Request, ScoringOptions
from tests.server.test_model_zoo import tiny_model

LABELS = ScoringOptions((5, 17, 42), False)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


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


def compiled_scores_as_eager(eager: ModelRunner, compiled: ModelRunner, rng: random.Random) -> None:
    shapes, num_queries = set(), set()
    for _ in range(6):  # 1-row, 1-token and query-less batches among them: those run eager
        sequences = [seq for request in random_requests(rng, eager.vocab_size)
                     for seq in request.sequences]
        expected, got = eager.run(sequences).scores, compiled.run(sequences).scores
        for row, expected_row in zip(got, expected, strict=True):
            assert row == pytest.approx(expected_row, abs=1e-6)
        eager.keep_only(())
        compiled.keep_only(())
        shapes.add(len(sequences))
        num_queries.add(len({seq.request.rid for seq in sequences}))
    assert compiled._items_forward.num_eager_fallbacks == 0
    assert len(shapes) > 2  # the graph served batch shapes the warm-up never ran
    assert {1, 2} <= num_queries  # batches of one request and of several


@contextlib.contextmanager
def dynamo_restarts() -> Iterator[list[str]]:
    """What dynamo logs when it throws a frame's trace away and traces it again."""
    restarts: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("Restarting analysis"):
                restarts.append(record.getMessage())
    catch = Catch()
    torch._logging.set_logs(dynamo=logging.INFO)
    logging.getLogger("torch._dynamo").addHandler(catch)
    try:
        yield restarts
    finally:
        logging.getLogger("torch._dynamo").removeHandler(catch)
        torch._logging.set_logs()


@pytest.mark.slow
@pytest.mark.parametrize("freeze", [False, True], ids=["weights", "frozen-weights"])
def test_compiled_runner_scores_as_eager_without_recompiling(tiny_model_dir, freeze):
    model, tokenizer = load_model(str(tiny_model_dir), torch.device("cpu"), torch.float32)
    eager, compiled = ModelRunner(model, tokenizer), ModelRunner(model, tokenizer)
    graphs_before = counters["stats"]["unique_graphs"]
    with dynamo_restarts() as restarts:
        assert compiled.compile(freeze) > 0 and compiled.is_compiled and not eager.is_compiled
    # Traced once: a float attribute traced as a symbol made dynamo trace the whole forward twice
    assert restarts == []
    assert compiled.compile_settings(freeze)["graph"] == (WHOLE_DECODER if freeze else ONE_LAYER)
    if not freeze:  # one graph, a decoder layer's, which all of the model's layers call
        assert len(model.model.layers) > 1 and counters["stats"]["unique_graphs"] - graphs_before == 1
    assert compiled._items_forward.compiled_layout == CASCADE and compiled.shares_query_in_forward
    compiled_scores_as_eager(eager, compiled, random.Random(0))


@pytest.mark.slow
def test_a_model_whose_window_cuts_compiles_the_masked_layout(tokenizer):
    model = tiny_model("mistral", len(tokenizer))  # a window shorter than its sequences
    eager, compiled = ModelRunner(model, tokenizer), ModelRunner(model, tokenizer)
    compiled.compile()
    assert compiled._items_forward.compiled_layout == MASKED and compiled.use_cascade
    assert compiled.compile_settings()["graph"] == WHOLE_DECODER  # its batch cache is indexed by layer
    # Batches of one query and of several (an expanded batch cache, or one filled per row): the
    # warm-up compiled both, so neither runs eager (before, every batch of two requests did).
    compiled_scores_as_eager(eager, compiled, random.Random(1))


def test_one_graph_of_a_layer_where_every_layer_computes_the_same_code():
    decoder = tiny_model("llama", 64).model
    assert graph_scope(CASCADE, False, decoder) == ONE_LAYER
    assert graph_scope(CASCADE, True, decoder) == WHOLE_DECODER  # a frozen graph holds one layer's weights
    assert graph_scope(MASKED, False, decoder) == WHOLE_DECODER
    assert graph_scope(CASCADE, False, torch.nn.Identity()) == WHOLE_DECODER  # no layers to take one at a time


def test_a_compile_that_fails_leaves_the_forward_eager():
    forward = ItemsForward(decoder=torch.nn.Identity())  # nothing to rewrite

    def warm_up(rows, own, slots, num_queries):
        raise RuntimeError("inductor failed")
    with pytest.raises(RuntimeError, match="inductor failed"):
        forward.compile(warm_up, CASCADE)
    assert not forward.is_compiled and forward.compiled_layout is None
