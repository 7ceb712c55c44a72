"""Every model that cannot be served is refused before anything is served, with one line naming
the cause: corrupt or missing weights of a supported family, a model that needs its own (remote)
code, a malformed config, an unsupported family. In-process through load_model() for each case,
then the real `python -m server` process: exit 2, one error line, no traceback."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from bench.server_process import free_port
from server.model_loader import ModelLoadError, incomplete_weights_reason, load_model, one_line
from server.model_support import remote_code_reason
from tests.kit.servers import server_env


def truncate_weights(folder):
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:weights.stat().st_size // 2])


def drop_a_tensor(folder):
    """A checkpoint without one tensor: transformers would only warn and fill it randomly."""
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    del weights["model.layers.0.self_attn.q_proj.weight"]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})


def edit_config(**changes):
    def edit(folder):
        config = json.loads((folder / "config.json").read_text())
        config.update(changes)
        (folder / "config.json").write_text(json.dumps(config))
    return edit


REMOTE_CODE = edit_config(model_type="internlm2", architectures=["InternLM2ForCausalLM"],
                          auto_map={"AutoConfig": "configuration_internlm2.InternLM2Config",
                                    "AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM"})
BROKEN = {
    # id: (how the tiny Llama folder is broken, words the one line must hold)
    "truncated-weights": (truncate_weights, ["could not load the weights", "SafetensorError"]),
    "missing-weights": (lambda folder: (folder / "model.safetensors").unlink(),
                        ["could not load the weights", "no file named model.safetensors"]),
    "a-tensor-missing": (drop_a_tensor, ["the checkpoint lacks 1 of the model's tensors",
                                         "model.layers.0.self_attn.q_proj.weight"]),
    "remote-code": (REMOTE_CODE, ["model type 'internlm2' needs the model's own code"]),
    "legacy-rope-without-factor": (edit_config(rope_scaling={"type": "linear"}),
                                   ["malformed config", "factor"]),
    "unknown-rope-type": (edit_config(rope_scaling={"type": "nonsense", "factor": 2.0}),
                          ["unknown RoPE type ['nonsense']"]),
    "heads-not-dividing-hidden": (edit_config(num_attention_heads=3),
                                  ["malformed config", "not a multiple"]),
    "not-json": (lambda folder: (folder / "config.json").write_text("{not json"),
                 ["could not load model", "not a valid JSON file"]),
    "no-model-type": (edit_config(model_type=None), ["no model_type"]),
    "unsupported-family": (edit_config(model_type="gpt2"), ["model type 'gpt2' is not one"]),
    "no-tokenizer": (lambda folder: [path.unlink() for path in folder.glob("tokenizer*")],
                     ["could not load the tokenizer"]),
}


@pytest.fixture
def broken(request, tiny_model_dir, tmp_path):
    """A copy of the tiny Llama folder, broken as the case says."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    request.param(folder)
    return folder


def cases():
    return [pytest.param(edit, words, id=name) for name, (edit, words) in BROKEN.items()]


@pytest.mark.parametrize("broken, words", cases(), indirect=["broken"])
def test_a_model_that_cannot_be_served_is_one_load_error_naming_the_cause(broken, words):
    with pytest.raises(ModelLoadError) as refused:
        load_model(str(broken), torch.device("cpu"), torch.float32)
    message = str(refused.value)
    assert "\n" not in message and len(message) < 600, message
    for word in words:
        assert word in message, message


def test_a_device_the_model_cannot_go_to_is_one_load_error(tiny_model_dir):
    # cuda:99 exists nowhere: a CPU build refuses CUDA, a GPU build the ordinal (as for a model
    # larger than the GPU's memory, the move is the last step that can fail)
    with pytest.raises(ModelLoadError) as refused:
        load_model(str(tiny_model_dir), torch.device("cuda", 99), torch.float32)
    message = str(refused.value)
    assert "\n" not in message and "could not move model" in message and "cuda:99" in message


def test_loading_info_without_gaps_is_no_reason():
    assert incomplete_weights_reason({"missing_keys": set(), "unexpected_keys": {"extra"},
                                      "mismatched_keys": set(), "error_msgs": []}) is None
    assert "wrong shape" in incomplete_weights_reason({"mismatched_keys": [("w", (2,), (3,))]})


def test_one_line_keeps_the_kind_and_flattens_the_message():
    assert one_line(ValueError("a\n  b\n")) == "ValueError: a b"
    assert one_line(KeyError()) == "KeyError"
    assert len(one_line(OSError("x" * 1000), limit=50)) == len("OSError: ") + 50


@pytest.mark.slow
@pytest.mark.parametrize("broken, words", [case for case in cases() if case.id in (
    "truncated-weights", "remote-code", "legacy-rope-without-factor", "unsupported-family")],
                         indirect=["broken"])
def test_the_server_process_exits_2_with_one_line_naming_the_cause(broken, words):
    done = subprocess.run([sys.executable, "-m", "server", "--model-path", str(broken),
                           "--port", str(free_port())], capture_output=True, text=True,
                          timeout=120, env=server_env(), stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if " ERROR server: " in line]
    assert len(errors) == 1, done.stderr[-2000:]
    for word in words:
        assert word in errors[0], errors[0]
    assert "serving on" not in done.stderr  # refused before anything was served


def test_auto_map_on_a_model_type_transformers_has_uses_its_own_code_not_the_models():
    assert remote_code_reason({"model_type": "llama", "auto_map": {"AutoConfig": "x.Y"}},
                              {"llama"}) is None
    assert "needs the model's own code" in remote_code_reason(
        {"model_type": "internlm2", "auto_map": {"AutoConfig": "x.Y"}}, {"llama"})
    assert remote_code_reason({"model_type": "gpt2"}, {"llama"}) is None  # refused later, as unsupported


@pytest.mark.slow
def test_the_default_gguf_file_is_parsed_once_for_its_config_tokenizer_and_weights(monkeypatch):
    """Each parse reads all of the file's metadata (the default model's 49,152-string vocabulary,
    ~2 s of a start): it was parsed five times, then three; and gguf's tensor name map was built
    for each of 397 tensors. gguf is itself again after the load."""
    import gguf

    from server.config import DEFAULT_MODEL

    parses, name_maps = [], []
    parse, build_map = gguf.GGUFReader.__init__, gguf.tensor_mapping.TensorNameMap.__init__

    def counted(reader, *args, **kwargs):
        parses.append(args)
        parse(reader, *args, **kwargs)

    def counted_map(name_map, *args, **kwargs):
        name_maps.append(args)
        build_map(name_map, *args, **kwargs)
    monkeypatch.setattr(gguf.GGUFReader, "__init__", counted)
    monkeypatch.setattr(gguf.tensor_mapping.TensorNameMap, "__init__", counted_map)
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    load_model(DEFAULT_MODEL, torch.device("cpu"), torch.float32)
    assert len(parses) == 1 and len(name_maps) == 1
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (reader, name_map)
