"""cascade_check: the start-time check that keeps the shared-prefix attention only where it agrees
with the masked layout (run on the GPU at start; here on the CPU, where the cascade is exact, and
with a cascade broken on purpose: its prefix part dropped)."""
from __future__ import annotations

import logging

import pytest
import torch
from transformers import AutoTokenizer

from bench.classifier_models import build_classifier
from server import cascade_attention
from server.__main__ import build_runner
from server.cascade_check import keep_cascade_if_it_agrees
from server.config import ServerConfig
from server.model_runner import ModelRunner
from tests.server.support import warnings_of
from tests.server.test_model_zoo import tiny_model


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_an_exact_cascade_is_kept(tokenizer, dtype):
    runner = ModelRunner(tiny_model("llama", len(tokenizer)).to(dtype), tokenizer, query_cache_tokens=1000)
    assert keep_cascade_if_it_agrees(runner) < 0.05
    assert runner.shares_query_in_forward and len(runner.query_cache) == 0  # nothing synthetic kept


def test_a_cascade_that_disagrees_is_turned_off_with_one_warning(tokenizer, monkeypatch, caplog):
    def without_prefix(query, key, value, bounds, prefixes, scale, query_after, kernel):  # one that lost the query
        out, _ = cascade_attention._attend(query, key, value, True, scale)
        return out.transpose(1, 2).contiguous()
    monkeypatch.setattr(cascade_attention, "_attend_with_prefix", without_prefix)
    runner = ModelRunner(tiny_model("llama", len(tokenizer)), tokenizer)
    with caplog.at_level(logging.WARNING):
        assert keep_cascade_if_it_agrees(runner) > 0.05
    assert not runner.shares_query_in_forward
    assert len(warnings_of(caplog)) == 1 and "masked layout" in warnings_of(caplog)[0]


@pytest.mark.parametrize("num_labels", [1, 3])
def test_a_decoder_classifier_is_checked_on_its_classes(tmp_path, num_labels):
    folder = build_classifier(tmp_path, "qwen3", num_labels=num_labels)
    runner = build_runner(ServerConfig(model_path=str(folder)).resolve("cpu", "float32"))
    assert keep_cascade_if_it_agrees(runner) < 1e-3 and runner.shares_query_in_forward
