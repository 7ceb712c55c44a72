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

from server.inputs import InputLimits, prepare
from server.model_runner import ModelRunner
from server.model_support import FAMILIES, unsupported_reason
from server.schemas import ScoreRequest
from server.sequence import Request
from tests.server.support import free_port

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
}
QUERY_TEXT = "What is the capital of California? Answer Yes or No for each of the following:"
ITEM_TEXTS = ["Sacramento", " San Jose San Francisco Los Angeles", " Yes",
              " apple banana fruit car"]


def tiny_model(family: str, vocab_size: int):
    config_class, settings = ZOO[family]
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
        prepared = prepare(body, runner.tokenize, limits)
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
}


@pytest.mark.parametrize("make_config, reason", REFUSED.values(), ids=REFUSED.keys())
def test_unsupported_models_are_refused_with_the_reason(make_config, reason):
    assert reason in unsupported_reason(make_config())


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
