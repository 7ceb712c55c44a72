"""The model zoo: tiny random models of every supported family, windows far shorter than the
sequences, scored in shared-prefix batches across requests, each score against an independent
transformers forward over the whole sequence; and the families the server refuses, with why.

This is the gate for any change to the runner's forward, cache or masks.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

from bench.server_process import free_port
from server.inputs import InputLimits, prepare
from server.model_runner import ModelRunner
from server.model_support import FAMILIES, layer_mask_keys, layer_windows, unsupported_reason
from server.schemas import ScoreRequest
from server.sequence import Request, ScoringOptions

WINDOW = 6  # tokens; every test sequence but the shortest is longer
SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
             tie_word_embeddings=False, initializer_range=0.2, pad_token_id=0, bos_token_id=1,
             eos_token_id=1)
MIXED = ["sliding_attention", "full_attention", "sliding_attention"]

# family id -> (config class, settings beyond SMALL). Random weights are drawn with a large
# initializer_range so that logits are far from uniform and a wrong mask shows.
ZOO = {
    "llama": (transformers.LlamaConfig, {}),
    "gemma": (transformers.GemmaConfig, {}),
    "mistral": (transformers.MistralConfig, {"sliding_window": WINDOW}),
    "phi3": (transformers.Phi3Config, {"sliding_window": WINDOW}),
    "qwen2": (transformers.Qwen2Config, {"use_sliding_window": True, "sliding_window": WINDOW,
                                         "max_window_layers": 1}),  # layer 0 full, 1-2 sliding
    "qwen3": (transformers.Qwen3Config, {"use_sliding_window": True, "sliding_window": WINDOW,
                                         "max_window_layers": 2}),
    "gemma2": (transformers.Gemma2Config, {"sliding_window": WINDOW, "layer_types": MIXED,
                                           "query_pre_attn_scalar": 8,
                                           "final_logit_softcapping": 3.0,
                                           "attn_logit_softcapping": 5.0}),
    "gemma3_text": (transformers.Gemma3TextConfig, {"sliding_window": WINDOW, "layer_types": MIXED,
                                                    "query_pre_attn_scalar": 8,
                                                    "final_logit_softcapping": 3.0}),
    "gpt_oss": (transformers.GptOssConfig, {"sliding_window": WINDOW, "layer_types": MIXED,
                                            "num_local_experts": 4, "num_experts_per_tok": 2}),
    "qwen3_moe": (transformers.Qwen3MoeConfig, {"use_sliding_window": True, "sliding_window": WINDOW,
                                                "num_experts": 4, "num_experts_per_tok": 2,
                                                "moe_intermediate_size": 16, "mlp_only_layers": [1],
                                                "norm_topk_prob": True}),
    "qwen2_moe": (transformers.Qwen2MoeConfig, {"use_sliding_window": True, "sliding_window": WINDOW,
                                                "max_window_layers": 2,  # layer 0 slides, 1-2 full
                                                "num_experts": 4, "num_experts_per_tok": 2,
                                                "moe_intermediate_size": 16,
                                                "shared_expert_intermediate_size": 24,
                                                "mlp_only_layers": [2]}),
    "mixtral": (transformers.MixtralConfig, {"sliding_window": WINDOW, "num_local_experts": 4,
                                             "num_experts_per_tok": 2}),
    "smollm3": (transformers.SmolLM3Config, {"use_sliding_window": True, "sliding_window": WINDOW,
                                             "no_rope_layers": [1, 0, 0],  # layers 1-2 NoPE
                                             "layer_types": MIXED}),
    "olmo2": (transformers.Olmo2Config, {}),
    "granite": (transformers.GraniteConfig, {"embedding_multiplier": 3.0, "residual_multiplier": 0.5,
                                             "attention_multiplier": 0.2, "logits_scaling": 2.5}),
    "glm4": (transformers.Glm4Config, {"partial_rotary_factor": 0.5}),
    "starcoder2": (transformers.Starcoder2Config, {"sliding_window": WINDOW}),
    "phi": (transformers.PhiConfig, {"partial_rotary_factor": 0.5, "qk_layernorm": True}),
    "cohere": (transformers.CohereConfig, {"logit_scale": 0.5, "use_qk_norm": True}),
}
# Families whose code never slides, with a window key a converted checkpoint may carry: ignored.
STRAY_WINDOW = {
    "llama": (transformers.LlamaConfig, {"sliding_window": WINDOW}),
    "gemma": (transformers.GemmaConfig, {"sliding_window": WINDOW, "use_sliding_window": True}),
}
QUERY_TEXT = "What is the capital of California? Answer Yes or No for each of the following:"
ITEM_TEXTS = ["Sacramento", " San Jose San Francisco Los Angeles", " Yes",
              " apple banana fruit car"]


def tiny_model(family: str, vocab_size: int, zoo=ZOO):
    config_class, settings = zoo[family]
    torch.manual_seed(0)
    config = config_class(vocab_size=vocab_size, **SMALL, **settings)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def zoo_requests(runner: ModelRunner) -> list[Request]:
    """Requests as the server builds them: text and token ids, query + item and item_first, an
    empty item, queries of 2-30 tokens and items of 1-40."""
    limits = InputLimits(runner.vocab_size, runner.max_context_tokens, 4096, 64)
    generator = torch.Generator().manual_seed(1)

    def ids(n: int) -> list[int]:
        return torch.randint(2, runner.vocab_size, (n,), generator=generator).tolist()

    bodies = [
        {"query": QUERY_TEXT, "items": ITEM_TEXTS},
        {"query": QUERY_TEXT, "items": ITEM_TEXTS[:2], "item_first": True, "apply_softmax": True},
        {"query": ids(30), "items": [ids(1), ids(17), ids(40)]},
        {"query": ids(2), "items": [ids(3), ids(25)], "apply_softmax": True},
        {"query": ids(11), "items": [ids(9), []]},  # an empty item: scored at the query's end
        {"query": ids(5), "items": [ids(12)], "item_first": True},
    ]
    requests = []
    for body in bodies:
        body = ScoreRequest(label_token_ids=[2, 7, 40], **body)
        prepared = prepare(body, runner.tokenize, limits, runner.special_tokens)
        requests.append(Request.create(prepared.prefix_ids, prepared.own_ids, prepared.options))
    return requests


def reference(model, ids: list[int], options) -> list[float]:
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0, -1].float()
    labels = list(options.label_token_ids)
    if options.apply_softmax:
        return torch.softmax(logits[labels], dim=-1).tolist()
    return torch.exp(torch.log_softmax(logits, dim=-1)[labels]).tolist()


def max_relative_error(runner: ModelRunner) -> float:
    """Score the zoo requests (all of them in one batch, then again with every prefix cached)
    and return the worst relative error against one plain forward per sequence."""
    requests = zoo_requests(runner)
    sequences = [seq for request in requests for seq in request.sequences]
    batched = runner.run(sequences).scores
    cached = runner.run(sequences[::-1]).scores[::-1]  # another layout, prefixes reused
    worst = 0.0
    for seq, *rows in zip(sequences, batched, cached):
        expected = torch.tensor(reference(runner.model, [*seq.request.prefix_ids, *seq.own_ids],
                                          seq.request.options))
        for row in rows:
            worst = max(worst, ((torch.tensor(row) - expected).abs() / expected).max().item())
    return worst


@pytest.mark.parametrize("family", sorted(ZOO))
def test_family_scores_match_a_full_forward_beyond_its_window(family, tokenizer):
    runner = ModelRunner(tiny_model(family, len(tokenizer)), tokenizer)
    assert max_relative_error(runner) <= 1e-4


@pytest.mark.parametrize("family", sorted(STRAY_WINDOW))
def test_a_stray_window_key_is_ignored_where_the_family_never_slides(family, tokenizer):
    model = tiny_model(family, len(tokenizer), STRAY_WINDOW)
    assert model.config.sliding_window == WINDOW  # the key is there, and the family ignores it
    assert max_relative_error(ModelRunner(model, tokenizer)) <= 1e-4


def test_the_zoo_covers_every_supported_family():
    assert set(ZOO) == set(FAMILIES)


REFUSED = {
    # id: (config factory, words the reason must contain)
    "unknown-architecture": (transformers.GPT2Config, "model type 'gpt2'"),
    "encoder": (transformers.BertConfig, "model type 'bert'"),
    "chunked-attention": (transformers.Llama4TextConfig, "model type 'llama4_text'"),
    "linear-attention-hybrid": (transformers.Qwen3NextConfig, "model type 'qwen3_next'"),
    "chunk-size-in-a-known-family": (lambda: transformers.LlamaConfig(attention_chunk_size=64),
                                     "chunked attention"),
    "longrope": (lambda: transformers.Phi3Config(
        hidden_size=32, num_attention_heads=4, original_max_position_embeddings=64,
        rope_parameters={"rope_type": "longrope", "short_factor": [1.0] * 4,
                         "long_factor": [2.0] * 4}), "longrope"),
    "bidirectional": (lambda: transformers.Gemma3TextConfig(use_bidirectional_attention=True),
                      "bidirectional"),
    "odd-layer-type": (lambda: transformers.Qwen2Config(
        num_hidden_layers=2, layer_types=["full_attention", "linear_attention"]),
                       "layer types ['linear_attention']"),
    "sliding-layer-without-window": (lambda: transformers.Qwen2Config(
        num_hidden_layers=2, layer_types=["full_attention", "sliding_attention"]),
                                     "sliding-window layers with sliding_window=None"),
}


@pytest.mark.parametrize("make_config, reason", REFUSED.values(), ids=REFUSED.keys())
def test_unsupported_models_are_refused_with_the_reason(make_config, reason):
    assert reason in unsupported_reason(make_config())


def test_each_layer_gets_the_window_its_family_code_applies():
    assert layer_windows(transformers.LlamaConfig(sliding_window=WINDOW)) == {"": None}
    assert layer_windows(transformers.MistralConfig(sliding_window=WINDOW)) == {"": WINDOW}
    qwen2 = transformers.Qwen2Config(num_hidden_layers=3, use_sliding_window=True,
                                     sliding_window=WINDOW, max_window_layers=1)
    assert layer_windows(qwen2) == {"full_attention": None, "sliding_attention": WINDOW}
    assert layer_mask_keys(qwen2) == ["full_attention", "sliding_attention", "sliding_attention"]
    # Qwen2's config drops a window that use_sliding_window does not turn on.
    assert layer_windows(transformers.Qwen2Config(sliding_window=WINDOW)) == {"full_attention": None}


def test_flash_attention_is_refused_since_it_ignores_prepared_masks():
    config = transformers.LlamaConfig()
    config._attn_implementation = "flash_attention_2"
    assert "flash_attention_2" in unsupported_reason(config)


def test_the_runner_refuses_an_unsupported_model(tokenizer):
    config = transformers.GPT2Config(vocab_size=len(tokenizer), n_embd=16, n_layer=1, n_head=2)
    with pytest.raises(ValueError, match="model type 'gpt2'"):
        ModelRunner(AutoModelForCausalLM.from_config(config), tokenizer)


def test_the_server_exits_2_naming_what_it_refuses(tmp_path, tokenizer):
    config = transformers.GPT2Config(vocab_size=len(tokenizer), n_embd=16, n_layer=1, n_head=2)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "server", "--model-path", str(tmp_path),
                           "--port", str(free_port())], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 2
    assert "model type 'gpt2' is not one the runner is proven exact on" in done.stderr


MOE_FAMILIES = ["gpt_oss", "mixtral", "qwen2_moe", "qwen3_moe"]


@pytest.mark.parametrize("family", MOE_FAMILIES)
def test_moe_routing_is_per_token_so_a_batch_changes_no_token(family):
    """A token's experts and weights depend on that token alone (no capacity, no batch-wide
    normalisation): the block's output for a token is the same alone as among 40 others."""
    model = tiny_model(family, 64)
    block = model.model.layers[0].mlp
    assert hasattr(block, "experts"), "layer 0 of the zoo's MoE models is a sparse block"
    hidden = torch.randn(2, 20, SMALL["hidden_size"], generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        together = block(hidden)
        together = together[0] if isinstance(together, tuple) else together
        alone = [block(hidden[row:row + 1, i:i + 1]) for row in range(2) for i in range(20)]
    alone = torch.cat([out[0] if isinstance(out, tuple) else out for out in alone]).view_as(together)
    torch.testing.assert_close(alone, together, rtol=1e-5, atol=1e-6)


CACHE_FAMILIES = ["llama", "mistral", "qwen2", "gemma2", "gpt_oss", "smollm3"]  # all slide but llama


@pytest.mark.parametrize("family", CACHE_FAMILIES)
def test_cached_queries_and_heads_score_as_a_fresh_runner(family, tokenizer):
    """Queries sharing a 20-token head, through one runner with a query cache, each against a
    runner that never saw a query. A whole query cached is a head of any query it begins; a
    shorter shared head is a slice only where no layer slides (a sliding layer kept just the last
    window - 1 keys), so there the query is computed whole."""
    model = tiny_model(family, len(tokenizer))
    runner = ModelRunner(model, tokenizer, query_cache_tokens=10_000)
    generator = torch.Generator().manual_seed(2)

    def ids(n: int) -> tuple[int, ...]:
        return tuple(torch.randint(2, len(tokenizer), (n,), generator=generator).tolist())

    system, items, options = ids(20), [ids(4), ids(1), ids(13)], ScoringOptions((2, 7, 40), False)
    slides = any(window is not None for window in layer_windows(model.config).values())
    cases = [(system, 20), (system + ids(9), 9), (system + ids(3), 3), (system, 0),
             (system[:12] + ids(8), 20 if slides else 8)]  # (query, query tokens computed)
    for query, num_computed in cases:
        result = runner.run(Request.create(query, items, options).sequences)
        runner.keep_only(())
        fresh = ModelRunner(model, tokenizer).run(Request.create(query, items, options).sequences)
        assert result.num_cached_tokens == len(query) * len(items) - num_computed
        for row, expected in zip(result.scores, fresh.scores, strict=True):
            assert row == pytest.approx(expected, abs=1e-6)
