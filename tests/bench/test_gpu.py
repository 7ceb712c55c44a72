"""bench.gpu: the prepared GPU run, end to end on the CPU (--dry-run: tiny model, 1 s of load),
and its pure parts: the environment check, the model config, the nvidia-smi parser."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpu import env
from bench.gpu.memory import parse_used_mib
from bench.gpu.model import num_parameters, qwen3_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_config_is_qwen3_0_6b_shaped():
    config = qwen3_config(tiny=False)
    shape = (config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
             config.num_key_value_heads, config.head_dim, config.intermediate_size,
             config.vocab_size, config.tie_word_embeddings)
    assert shape == (1024, 28, 16, 8, 128, 3072, 151936, True)
    assert round(num_parameters(tiny=False) / 1e6) == 596  # Qwen3-0.6B's count, embeddings tied


@pytest.mark.parametrize("found, ok", [("5.17.0", False), ("5.24.0", True), ("6.0.0.dev0", True)],
                         ids=["device-image-5.17", "floor", "newer"])
def test_an_old_transformers_is_reported(monkeypatch, found, ok):
    monkeypatch.setattr(env.importlib.metadata, "version",
                        lambda dist: found if dist == "transformers" else "999")
    problems = env.missing_packages()
    assert (not problems) == ok
    if not ok:
        assert problems == [("transformers 5.17.0 is older than 5.24 (needed by the model (the "
                             "`cache=` forward argument)): pip install 'transformers>=5.24'")]


def test_missing_server_packages_are_named(monkeypatch):
    absent = {"fastapi", "uvicorn", "pydantic"}
    real_find_spec = env.importlib.util.find_spec
    monkeypatch.setattr(env.importlib.util, "find_spec",
                        lambda name: None if name in absent else real_find_spec(name))
    problems = env.check_environment(need_cuda=False)
    assert [p.split()[0] for p in problems] == ["fastapi", "uvicorn", "pydantic"]
    assert all("is not installed (needed by the server)" in p for p in problems)


def test_a_cpu_torch_is_not_enough_for_the_real_run():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    assert any("CUDA" in p for p in env.check_environment(need_cuda=True))


def test_nvidia_smi_lines_of_the_server_are_summed():
    text = "123, 5000\n456, 700\n123, 24\n[N/A], [N/A]\n"
    assert parse_used_mib(text, 123) == 5024
    assert parse_used_mib(text, 9) == 0


def test_dry_run_checks_serves_and_reports():
    done = subprocess.run([sys.executable, "-m", "bench.gpu", "--dry-run"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    out = done.stdout
    assert out.count("? ok") == 3 and "FAILED" not in out
    for field in ("Requests succeeded:", "Items/s achieved:", "P99 latency:", "Peak running:",
                  "peak GPU memory (server process): n/a", "SGLang (H100, Qwen3-0.6B)",
                  "plain batched forward (bfloat16", "bfloat16 matmul ceiling:",
                  "server / plain batched forward:", "fraction of the ceiling: server"):
        assert field in out
    assert "Requests failed:      0" in out
