"""bench.lora on the tests' tiny Llama: it runs every scenario and prints its ratios, and the mixed
batch scores what the by-adapter batches score (the same rows through the same adapters)."""
import json

import pytest

from bench.lora import SCENARIOS, main
from tests.kit.models import build_tiny_model


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama-lora-bench"))


def test_it_prints_each_scenario_and_the_ratios(tiny_model_dir, capsys):
    argv = ["--model-path", str(tiny_model_dir), "--requests", "3", "--items", "2", "--query-tokens", "9",
            "--item-tokens", "4", "--rank", "2", "--adapters", "2", "--rounds", "1"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert all(f"  {name}" in text for name in SCENARIOS) and "mixed 2 adapters / single adapter:" in text
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["max_diff"] < 1e-5 and result["mixed_vs_single"] > 0
