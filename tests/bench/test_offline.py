"""bench.offline on a tiny random Llama: the naive loop and ModelRunner.run score the same
requests alike (so comparing their speeds is fair), and the helpers measure what they claim."""
import pytest
import torch

from bench import offline
from bench.workload import Workload, make_bodies
from server.model_runner import ModelRunner
from tests.kit.models import build_tiny_model


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama-bench"))


def load(folder, dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()
    return ModelRunner(model, AutoTokenizer.from_pretrained(folder))


@pytest.fixture(scope="module")
def runner(folder):
    return load(folder, torch.float32)


@pytest.fixture(scope="module")
def bodies():
    workload = Workload(num_items=3, query_tokens=6, item_tokens=4, label_ids=(5, 7),
                        vocab_size=300)
    return make_bodies(workload, 2, seed=0)


def test_naive_loop_and_offline_path_give_the_same_scores(runner, bodies):
    naive = offline.measure_naive(runner.model, bodies)
    batched = offline.measure_runner(runner, bodies)
    assert len(naive.scores) == len(batched.scores) == 6  # 2 requests x 3 items
    assert offline.max_abs_diff(naive.scores, batched.scores) < 1e-5
    assert naive.items_per_s > 0 and batched.items_per_s > 0


def test_runner_path_leaves_no_query_cached(runner, bodies):
    offline.runner_scores(runner, bodies[0])
    assert runner.num_cached_prefixes == 0


def test_with_dtype_copies_the_weights_and_leaves_the_original_alone(runner, bodies):
    bf16 = offline.with_dtype(runner, torch.bfloat16)
    assert bf16.dtype == torch.bfloat16 and runner.dtype == torch.float32
    exact = offline.runner_scores(runner, bodies[0])
    rounded = offline.runner_scores(bf16, bodies[0])
    # Not equal (bf16 keeps 8 bits of mantissa) but the same scores to within a few percent.
    assert offline.max_abs_diff(exact, rounded) < 0.05


def test_with_dtype_scores_exactly_like_a_model_loaded_in_that_dtype(folder, runner, bodies):
    # model.to(bfloat16) would also round the rotary inv_freq buffer and miss this equality.
    loaded = load(folder, torch.bfloat16)
    cast = offline.with_dtype(runner, torch.bfloat16)
    assert offline.runner_scores(cast, bodies[1]) == offline.runner_scores(loaded, bodies[1])


@pytest.mark.parametrize("a, b, expected", [
    ([[0.1, 0.2]], [[0.1, 0.2]], 0.0),
    ([[0.1, 0.2], [0.5, 0.5]], [[0.1, 0.25], [0.4, 0.5]], 0.1),
    ([], [], 0.0),
], ids=["equal", "largest-of-all-cells", "empty"])
def test_max_abs_diff(a, b, expected):
    assert offline.max_abs_diff(a, b) == pytest.approx(expected)


def test_max_abs_diff_refuses_lists_of_different_length():
    with pytest.raises(ValueError):
        offline.max_abs_diff([[0.1]], [])


@pytest.mark.parametrize("scores, expected", [
    ([0.01, 0.03], [0.25, 0.75]),
    ([0.2, 0.2, 0.1], [0.4, 0.4, 0.2]),
    ([0.0, 0.0], [0.0, 0.0]),  # both underflowed: left as is, no division by zero
], ids=["two-labels", "three-labels", "all-zero"])
def test_label_softmax(scores, expected):
    assert offline.label_softmax([scores])[0] == pytest.approx(expected)


def test_plain_batched_forward_scores_as_the_naive_loop(runner, bodies):
    for body in bodies:
        assert offline.max_abs_diff(offline.plain_batched_scores(runner.model, body),
                                    offline.naive_scores(runner.model, body)) < 1e-6


def test_plain_batched_forward_refuses_items_of_different_lengths(runner):
    from bench.workload import ScoreBody
    with pytest.raises(ValueError, match="one length"):
        offline.plain_batched_scores(runner.model, ScoreBody((101,), ((102,), (103, 104)), (5,)))
