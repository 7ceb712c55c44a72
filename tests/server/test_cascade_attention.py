"""cascade_attention: the shared-prefix attention (prefix part + own causal part merged by their
log-sum-exp) against SDPA over the concatenated keys with a mask; when the runner may take it
(cascade_reason), and that the runner's scores through it equal the masked layout's and a plain
forward's, in float32 and (within bf16's rounding) in bfloat16."""
from __future__ import annotations

import pytest
import torch
import transformers
from torch.nn.functional import scaled_dot_product_attention
from transformers import AutoTokenizer

from server import cascade_attention as cascade_module
from server.cascade_attention import (
    PrefixSegments,
    cascade_attention,
    cascade_reason,
    joins_prefix,
    merge,
    prefix_segments,
    query_halves,
    runs_outside,
)
from server.compiled_forward import ItemsForward
from server.model_runner import ModelRunner
from tests.server.test_model_zoo import WINDOW, max_relative_error, tiny_model, zoo_requests

ROWS, HEADS, KV_HEADS, OWN, DIM = 4, 6, 2, 7, 8


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


class Layer:
    layer_idx = 0


def reference(query, keys, values, prefix, scale):
    """SDPA of one row's queries over its prefix keys then its own, causal on the own part."""
    if prefix is not None:
        keys, values = torch.cat([prefix[0], keys], 2), torch.cat([prefix[1], values], 2)
    num_prefix = keys.shape[2] - query.shape[2]
    mask = torch.ones(query.shape[2], keys.shape[2], dtype=torch.bool).tril(num_prefix)
    group = query.shape[1] // keys.shape[1]
    return scaled_dot_product_attention(query.float(), keys.float().repeat_interleave(group, 1),
                                        values.float().repeat_interleave(group, 1), attn_mask=mask,
                                        scale=scale)


def random_case(dtype):
    generator = torch.Generator().manual_seed(0)

    def draw(*shape):
        return torch.randn(*shape, generator=generator).to(dtype)

    # The query laid out as a projection viewed into heads is: [rows, own, heads, dim] transposed.
    query = draw(ROWS, OWN, HEADS, DIM).transpose(1, 2)
    return query, draw(ROWS, KV_HEADS, OWN, DIM), draw(ROWS, KV_HEADS, OWN, DIM), {
        "longer-than-own": (draw(1, KV_HEADS, 11, DIM), draw(1, KV_HEADS, 11, DIM)),
        "long": (draw(1, KV_HEADS, 5, DIM), draw(1, KV_HEADS, 5, DIM)),
        "short": (draw(1, KV_HEADS, 3, DIM), draw(1, KV_HEADS, 3, DIM))}


# Segments: which rows share which prefix; rows outside every segment have none. On CPU a prefix
# shorter than the rows' own run is joined to their keys (one call), a longer one merged (two).
LAYOUTS = {
    "one-prefix-for-all-rows": ((0, 4, "long"),),
    "two-requests-and-a-row-without-prefix": ((0, 2, "long"), (3, 4, "short")),
    "one-long-prefix-for-all-rows": ((0, 4, "longer-than-own"),),
    "a-joined-prefix-a-merged-one-and-a-row-without": ((0, 2, "short"), (2, 3, "longer-than-own")),
    "no-prefix-at-all": (),
}


# CUDA's kernel (the memory-efficient one) runs where a GPU is: `pytest -m gpu` on such a machine.
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device")])]


@pytest.fixture(params=["one-call", "halves"])
def joined_calls(request, monkeypatch):
    """The joined attention's query runs as at serving sizes: one call at these short rows, or
    (as from 128 own tokens) one call per half of the queries."""
    if request.param == "halves":
        monkeypatch.setattr(cascade_module, "JOIN_MIN_HALF", 2)
    return request.param


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 2e-2)],
                         ids=["float32", "bfloat16"])
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_cascade_equals_masked_attention_over_prefix_and_own_keys(layout, dtype, tolerance, device, joined_calls):
    query, keys, values, prefixes = random_case(dtype)
    if device != "cpu":
        query, keys, values = query.to(device), keys.to(device), values.to(device)
        prefixes = {name: (k.to(device), v.to(device)) for name, (k, v) in prefixes.items()}
    segments = PrefixSegments(tuple((start, end) for start, end, _ in layout),
                              (tuple(prefixes[name] for _, _, name in layout),))
    with prefix_segments(segments):
        out, weights = cascade_attention(Layer(), query, keys, values, None, scaling=0.3)
    assert weights is None and out.shape == (ROWS, OWN, HEADS, DIM) and out.dtype == dtype
    prefix_of = {row: prefixes[name] for start, end, name in layout for row in range(start, end)}
    for row in range(ROWS):
        prefix = prefix_of.get(row)
        expected = reference(query[row:row + 1].cpu(), keys[row:row + 1].cpu(), values[row:row + 1].cpu(),
                             prefix and (prefix[0].cpu(), prefix[1].cpu()), 0.3)
        torch.testing.assert_close(out[row:row + 1].transpose(1, 2).float().cpu(), expected,
                                   atol=tolerance, rtol=tolerance)


# A query computed in its items' forward: rows[start:end] take the first n keys of row `query_row`
# as their prefix, and that row sees only its own keys (the runner puts it right after its items).
QUERY_ROW_LAYOUTS = {
    "right-after-its-items-joined": ((0, 3), 3, 5),
    "right-after-its-items-merged": ((0, 3), 3, 7),   # as long as the rows: the two-call cascade
    "apart-from-its-items": ((0, 2), 3, 5),           # row 2 between them has no prefix
}


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 2e-2)],
                         ids=["float32", "bfloat16"])
@pytest.mark.parametrize("segment, query_row, length", QUERY_ROW_LAYOUTS.values(), ids=QUERY_ROW_LAYOUTS.keys())
def test_a_query_row_of_the_forward_is_its_items_prefix_and_sees_only_itself(segment, query_row, length,
                                                                            dtype, tolerance, joined_calls):
    query, keys, values, _ = random_case(dtype)
    segments = PrefixSegments((segment,), ((None,),), ((query_row, length),))
    with prefix_segments(segments):
        out, _ = cascade_attention(Layer(), query, keys, values, None, scaling=0.3)
    prefix = (keys[query_row:query_row + 1, :, :length], values[query_row:query_row + 1, :, :length])
    for row in range(ROWS):
        sees = prefix if segment[0] <= row < segment[1] else None
        expected = reference(query[row:row + 1], keys[row:row + 1], values[row:row + 1], sees, 0.3)
        torch.testing.assert_close(out[row:row + 1].transpose(1, 2).float(), expected, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize(("length", "runs"), [
    (180, [(0, 90), (90, 180)]), (129, [(0, 64), (64, 129)]), (127, [(0, 127)]), (7, [(0, 7)])])
def test_the_joined_attention_computes_each_half_of_a_long_run_apart(length, runs):
    assert query_halves(length) == runs


@pytest.mark.parametrize("rows, segments, expected", [
    (5, [], [(0, 5)]), (5, [(0, 5)], []), (5, [(1, 2), (3, 4)], [(0, 1), (2, 3), (4, 5)]), (4, [(0, 3)], [(3, 4)])])
def test_the_rows_no_segment_covers_run_together(rows, segments, expected):
    assert runs_outside(rows, segments) == expected


@pytest.mark.parametrize("prefix, own, device, joined", [
    (120, 180, "cpu", True), (180, 180, "cpu", False), (1000, 20, "cpu", False), (120, 180, "cuda", False)])
def test_a_prefix_shorter_than_the_rows_is_joined_to_their_keys_on_cpu_only(prefix, own, device, joined):
    assert joins_prefix(prefix, own, torch.device(device)) is joined


def test_merge_weighs_each_part_by_its_share_of_the_softmax():
    scores = torch.randn(3, 9, generator=torch.Generator().manual_seed(2))
    values = torch.randn(9, 4, generator=torch.Generator().manual_seed(3))
    whole = torch.softmax(scores, -1) @ values
    parts = [(torch.softmax(scores[:, cut], -1) @ values[cut], scores[:, cut].logsumexp(-1, keepdim=True))
             for cut in (slice(0, 4), slice(4, 9))]
    torch.testing.assert_close(merge(*parts[0], *parts[1]), whole)


def test_cascade_refuses_a_forward_it_was_not_given_the_prefixes_of():
    query, keys, values, _ = random_case(torch.float32)
    with pytest.raises(ValueError, match="prefix_segments"):
        cascade_attention(Layer(), query, keys, values, None, scaling=0.3)


def config(family=transformers.LlamaConfig, implementation="sdpa", **settings):
    made = family(**settings)
    made._attn_implementation = implementation
    return made


CPU = torch.device("cpu")
REASONS = {
    # id: (config, device, windows, tokens per sequence, words of the reason or None)
    "full-attention-on-cpu": (config(), CPU, [None, None], 4000, None),
    "a-window-longer-than-every-sequence": (config(), CPU, [None, 64], 64, None),
    "a-window-that-cuts": (config(), CPU, [None, 64], 65, "sliding window"),
    "cuda": (config(), torch.device("cuda"), [None], 10, None),
    "mps": (config(), torch.device("mps"), [None], 10, "mps"),
    "eager": (config(implementation="eager"), CPU, [None], 10, "'eager'"),
    "soft-capped-logits": (config(transformers.Gemma2Config, attn_logit_softcapping=5.0), CPU,
                           [None], 10, "soft-capped"),
    "sinks": (config(transformers.GptOssConfig), CPU, [None], 10, "sinks"),
}


@pytest.mark.parametrize("made, device, windows, tokens, words", REASONS.values(), ids=REASONS.keys())
def test_cascade_reason(made, device, windows, tokens, words):
    reason = cascade_reason(made, device, windows, tokens)
    assert reason is None if words is None else words in reason


@pytest.fixture
def forwards(monkeypatch):
    """How many items forwards went through the cascade and through the masked layout."""
    counts = {"cascade": 0, "masked": 0}
    cascade, masked = ItemsForward.cascade, ItemsForward.__call__

    def counted(kind, forward):
        def call(*args, **kwargs):
            counts[kind] += 1
            return forward(*args, **kwargs)
        return call
    monkeypatch.setattr(ItemsForward, "cascade", counted("cascade", cascade))
    monkeypatch.setattr(ItemsForward, "__call__", counted("masked", masked))
    return counts


def scores_both_ways(runner: ModelRunner) -> tuple[list, list]:
    sequences = [seq for request in zoo_requests(runner) for seq in request.sequences]
    cascade = runner.run(sequences).scores
    runner.use_cascade = False
    try:
        return cascade, runner.run(sequences).scores
    finally:
        runner.use_cascade = True


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 2e-2)],
                         ids=["float32", "bfloat16"])
def test_runner_scores_through_the_cascade_as_through_the_masked_layout(tokenizer, forwards, dtype,
                                                                        tolerance):
    runner = ModelRunner(tiny_model("llama", len(tokenizer)).to(dtype), tokenizer)
    cascade, masked = scores_both_ways(runner)
    assert forwards["cascade"] > 0 and forwards["masked"] > 0  # each way ran
    for cascade_row, masked_row in zip(cascade, masked, strict=True):
        assert cascade_row == pytest.approx(masked_row, abs=tolerance)


def test_runner_takes_the_cascade_and_matches_a_plain_forward(tokenizer, forwards):
    runner = ModelRunner(tiny_model("llama", len(tokenizer)), tokenizer)
    assert max_relative_error(runner) <= 1e-4
    assert forwards["cascade"] > 0 and forwards["masked"] == 0


def test_a_window_longer_than_every_sequence_keeps_the_cascade(tokenizer, forwards):
    long_window = {"mistral": (transformers.MistralConfig, {"sliding_window": 200})}
    assert max_relative_error(ModelRunner(tiny_model("mistral", len(tokenizer), long_window),
                                          tokenizer)) <= 1e-4
    assert forwards["cascade"] > 0 and forwards["masked"] == 0


def test_a_window_that_cuts_the_sequences_takes_the_masked_layout(tokenizer, forwards):
    runner = ModelRunner(tiny_model("mistral", len(tokenizer)), tokenizer)
    assert runner.model.config.sliding_window == WINDOW
    assert max_relative_error(runner) <= 1e-4
    assert forwards["cascade"] < forwards["masked"]  # only the groups shorter than the window


def test_the_runner_says_its_forwards_hold_a_query_once_only_where_every_forward_takes_the_cascade(
        tokenizer):
    # The scheduler's prefill budget counts a query once per batch only then (count_query_once):
    # a padded cache holds the query once per row, which the budget must still bound.
    llama = ModelRunner(tiny_model("llama", len(tokenizer)), tokenizer)
    assert llama.shares_query_in_forward
    llama.use_cascade = False
    assert not llama.shares_query_in_forward
    windowed = ModelRunner(tiny_model("mistral", len(tokenizer)), tokenizer)  # a window that cuts
    assert not windowed.shares_query_in_forward
