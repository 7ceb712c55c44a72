"""bench.ceiling: the arithmetic of the ceiling, and what it counts on a tiny random Llama."""
import pytest
import torch

from bench.ceiling import Ceiling, linear_weights, matmul_gflops, matmul_shape, measure_ceiling, processor
from tests.kit.models import build_tiny_model


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    folder = build_tiny_model(tmp_path_factory.mktemp("tiny-llama-ceiling"))
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def test_ceiling_is_matmul_speed_over_linear_flops_of_the_computed_tokens():
    # The figures: 3,000 GFLOP/s, 2 x 106 M weights, 192 tokens per item -> ~73 items/s.
    ceiling = Ceiling("bfloat16", 3000.0, 2 * 106e6, 180 + 120 / 10)
    assert ceiling.items_per_s == pytest.approx(73.7, abs=0.1)
    assert ceiling.fraction(11.6) == pytest.approx(0.157, abs=0.001)


def test_linear_weights_count_the_decoder_linears_only(model):
    config = model.config
    hidden, inter, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    kv = config.num_key_value_heads * hidden // config.num_attention_heads
    per_layer = hidden * hidden * 2 + hidden * kv * 2 + hidden * inter * 3  # q, o; k, v; MLP
    assert linear_weights(model) == layers * per_layer  # no embeddings, no LM head


def test_matmul_shape_is_the_mlp_up_projection(model):
    assert matmul_shape(model, 3000) == (3000, model.config.hidden_size,
                                         model.config.intermediate_size)


def test_measured_ceiling_is_positive_and_names_the_dtype(model):
    assert matmul_gflops(64, 32, 48, torch.float32, seconds=0.05) > 0
    ceiling = measure_ceiling(model, torch.float32, 12, 18, 3, tokens=64, seconds=0.05)
    assert ceiling.dtype == "float32" and ceiling.tokens_per_item == 22
    assert ceiling.flops_per_token == 2 * linear_weights(model)


def test_processor_names_the_cpu_and_counts_its_logical_cpus(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
                       "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n")
    text = processor(cpuinfo)
    assert text.startswith("Intel(R) Xeon(R) Platinum 8480+, 2 logical CPUs, torch ")
    assert "native bf16: " in text
