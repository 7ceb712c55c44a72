"""ModelRunner on a tiny random Llama: shared-prefix, multi-request batches equal the unshared
computation (one plain forward per item)."""
from __future__ import annotations

import random

import pytest
import torch

from server.model_loader import load_model
from server.model_runner import ModelRunner
from server.sequence import Request, ScoringOptions

LABELS = ScoringOptions((5, 17, 42), False)
SOFTMAX = ScoringOptions((5, 17, 42), True)


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return load_model(str(tiny_model_dir), torch.device("cpu"), torch.float32)


@pytest.fixture
def runner(tiny):
    """A fresh runner (an empty query cache) over the module's model."""
    return ModelRunner(*tiny)


def reference(runner: ModelRunner, ids: list[int], options: ScoringOptions) -> list[float]:
    """What a user writes first: one forward over the whole sequence, last position."""
    with torch.inference_mode():
        logits = runner.model(torch.tensor([ids])).logits[0, -1].float()
    labels = list(options.label_token_ids)
    if options.apply_softmax:
        return torch.softmax(logits[labels], dim=-1).tolist()
    return torch.exp(torch.log_softmax(logits, dim=-1)[labels]).tolist()


def assert_matches_reference(runner, sequences, scores):
    for seq, row in zip(sequences, scores):
        expected = reference(runner, list(seq.request.prefix_ids + seq.own_ids), seq.request.options)
        assert row == pytest.approx(expected, abs=1e-5)


def test_items_sharing_a_query_match_one_forward_per_item(runner):
    request = Request.create((3, 9, 27, 81), [(1, 2), (7,), (11, 12, 13, 14)], LABELS)
    result = runner.run(request.sequences)
    assert_matches_reference(runner, request.sequences, result.scores)
    # The 4-token query is computed once and reused by the other two items.
    assert result.num_cached_tokens == 4 * 2


def test_several_requests_with_different_lengths_share_one_batch(runner):
    first = Request.create((3, 9, 27, 81, 100, 101), [(1, 2), (7,)], LABELS)
    second = Request.create((50,), [(60, 61, 62, 63, 64)], SOFTMAX)
    unshared = Request.create((), [(70, 71, 72), (8,)], LABELS)  # e.g. item_first
    sequences = [*first.sequences, *second.sequences, *unshared.sequences]
    result = runner.run(sequences)
    assert_matches_reference(runner, sequences, result.scores)


def test_softmax_over_labels_sums_to_one(runner):
    request = Request.create((1, 2, 3), [(4,), (5, 6)], SOFTMAX)
    for row in runner.run(request.sequences).scores:
        assert sum(row) == pytest.approx(1.0, abs=1e-6)


def test_a_query_split_across_batches_is_computed_once(runner):
    request = Request.create((3, 9, 27), [(1,), (2,), (4,)], LABELS)
    first = runner.run(request.sequences[:2])
    second = runner.run(request.sequences[2:])
    assert (first.num_cached_tokens, second.num_cached_tokens) == (3, 3)
    assert_matches_reference(runner, request.sequences, first.scores + second.scores)


def test_keep_only_forgets_prefixes_of_requests_that_left(runner):
    done = Request.create((1, 2), [(3,)], LABELS)
    live = Request.create((4, 5), [(6,)], LABELS)
    runner.run([*done.sequences, *live.sequences])
    runner.keep_only({live.rid})
    assert runner.num_cached_prefixes == 1
    runner.keep_only(set())
    assert runner.num_cached_prefixes == 0


def test_tokenize_adds_no_special_tokens(runner):
    assert runner.tokenize("Yes") == runner.tokenizer("Yes", add_special_tokens=False)["input_ids"]
    assert runner.vocab_size == runner.model.config.vocab_size
    assert runner.max_context_tokens == 256


@pytest.mark.parametrize("max_padding_fraction", [0.05, 1.0], ids=["grouped", "one-forward"])
def test_mixed_lengths_across_requests_match_an_independent_forward(tiny_model_dir,
                                                                    max_padding_fraction):
    model, tokenizer = load_model(str(tiny_model_dir), torch.device("cpu"), torch.float32)
    runner = ModelRunner(model, tokenizer, max_padding_fraction=max_padding_fraction)
    rng = random.Random(7)

    def ids(n):
        return tuple(rng.randrange(1, runner.vocab_size) for _ in range(n))

    requests = [Request.create(ids(rng.randint(4, 20)),
                               [ids(rng.randint(2, 34)) for _ in range(rng.randint(2, 6))],
                               rng.choice([LABELS, SOFTMAX])) for _ in range(4)]
    requests.append(Request.create((), [ids(9), ids(30)], LABELS))  # no shared prefix
    sequences = [seq for request in requests for seq in request.sequences]
    rng.shuffle(sequences)
    result = runner.run(sequences)
    for seq, row in zip(sequences, result.scores):
        expected = reference(runner, list(seq.request.prefix_ids + seq.own_ids),
                             seq.request.options)
        assert row == pytest.approx(expected, abs=1e-4)
    own = [len(seq.own_ids) for seq in sequences]
    num_prefixes = sum(len(r.prefix_ids) for r in requests)
    assert result.num_computed_tokens - result.num_padding_tokens == num_prefixes + sum(own)
    if max_padding_fraction == 1.0:  # one forward padded to the longest item, each query a row of it
        queries = [r for r in requests if r.prefix_ids]
        assert result.num_padding_tokens == (len(own) + len(queries)) * max(own) - sum(own) - num_prefixes
