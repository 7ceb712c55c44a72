"""LoRA adapters in PEFT's format, read for the decoder runner and checked against its model.

load_adapter() reads a folder's adapter_config.json (through peft's LoraConfig, so the fields an
older file lacks get peft's defaults) and adapter_model.safetensors, and refuses, with a message,
what the runner cannot apply exactly: any variant beyond plain LoRA (DoRA, biases, whole trained
modules, per-module alphas ...), a module the model does not have or of another shape (an adapter
for another base model), a target that is not a Linear layer inside the decoder (embeddings,
lm_head, a classification head). Applying them per row is lora_rows.py's job.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

CONFIG_FILE, WEIGHTS_FILE = "adapter_config.json", "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."  # what PEFT's save_pretrained puts before the model's own names
# adapter_config.json fields that change a forward beyond W + (alpha / r) B A, each refused when
# set (truthy): the runner would otherwise score something the adapter's trainer never saw.
UNSUPPORTED = {
    "use_dora": "DoRA (use_dora)", "lora_bias": "a LoRA bias (lora_bias)",
    "fan_in_fan_out": "fan_in_fan_out (Conv1D layers)",
    "modules_to_save": "modules_to_save (trained copies of whole modules)",
    "alpha_pattern": "per-module alphas (alpha_pattern)", "layer_replication": "layer_replication",
    "trainable_token_indices": "trainable_token_indices",
    "alora_invocation_tokens": "activated LoRA (alora_invocation_tokens)",
    "target_parameters": "target_parameters (LoRA on raw parameters)", "use_qalora": "QALoRA (use_qalora)",
    "use_bdlora": "use_bdlora", "arrow_config": "Arrow routing (arrow_config)",
}


@dataclass(frozen=True)
class LoraWeights:
    """One Linear layer's low-rank update: y += scale * B(A(x))."""

    a: torch.Tensor  # [rank, in_features]
    b: torch.Tensor  # [out_features, rank]
    scale: float     # lora_alpha / rank (rsLoRA: / sqrt(rank))

    def delta(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.linear(x, self.a), self.b) * self.scale


@dataclass(frozen=True)
class Adapter:
    name: str
    path: str
    modules: dict[str, LoraWeights]  # the model's module name (model.get_submodule) -> its update

    def to_dict(self) -> dict:
        """What /get_server_info shows of it."""
        ranks = sorted({weights.a.shape[0] for weights in self.modules.values()})
        return {"path": self.path, "ranks": ranks, "num_modules": len(self.modules)}


def load_adapters(paths: dict[str, str], model) -> list[Adapter]:
    """--lora-paths' adapters (name -> folder) for `model`; ValueError naming the one refused."""
    adapters = []
    for name, folder in paths.items():
        try:
            adapters.append(load_adapter(name, folder, model))
        except Exception as error:  # noqa: BLE001 - a corrupt file's error too: one line, exit 2
            raise ValueError(f"--lora-paths {name}={folder}: {error}") from error
    return adapters


def load_adapter(name: str, folder: str, model) -> Adapter:
    """The adapter in `folder` for `model`, its weights in the model's dtype and device. ValueError
    with a one-line reason for anything the runner cannot apply exactly."""
    config = read_config(Path(folder))
    from safetensors.torch import load_file

    tensors = load_file(str(Path(folder) / WEIGHTS_FILE))
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        module, _, kind = key.removeprefix(PEFT_PREFIX).rpartition(".lora_")
        if kind not in ("A.weight", "B.weight"):
            raise ValueError(f"weight {key!r} is not a LoRA A or B matrix (only plain LoRA on Linear layers is served)")
        pairs.setdefault(module, {})[kind[0]] = tensor
    if not pairs:
        raise ValueError(f"{WEIGHTS_FILE} holds no LoRA weights")
    decoder_modules = {id(module) for module in model.get_decoder().modules()}
    base = config.base_model_name_or_path
    modules = {}
    for module_name, pair in sorted(pairs.items()):
        layer = _target(model, module_name, decoder_modules, base)
        if set(pair) != {"A", "B"}:
            raise ValueError(f"{module_name} has lora_{'A' if 'A' not in pair else 'B'} missing")
        a, b = pair["A"], pair["B"]
        if a.shape[1] != layer.in_features or b.shape[0] != layer.out_features or a.shape[0] != b.shape[1]:
            raise ValueError(f"{module_name}: lora_A {list(a.shape)} and lora_B {list(b.shape)} do not fit the "
                             f"model's [{layer.out_features}, {layer.in_features}] layer (an adapter for "
                             f"another base model? its base: {base})")
        rank = a.shape[0]
        scale = config.lora_alpha / (math.sqrt(rank) if config.use_rslora else rank)
        dtype, device = layer.weight.dtype, layer.weight.device
        modules[module_name] = LoraWeights(a.to(device, dtype), b.to(device, dtype), scale)
    return Adapter(name, folder, modules)


def read_config(folder: Path):
    """The folder's LoraConfig, refused when the folder or its files are missing, the adapter is
    not a LoRA, or it sets a field of UNSUPPORTED."""
    for file in (CONFIG_FILE, WEIGHTS_FILE):
        if not (folder / file).is_file():
            raise ValueError(f"{folder} has no {file} (a PEFT adapter folder, as save_pretrained writes it)")
    raw = json.loads((folder / CONFIG_FILE).read_text())
    if raw.get("peft_type") != "LORA":
        raise ValueError(f"peft_type {raw.get('peft_type')!r} is not LORA")
    from peft import LoraConfig

    config = LoraConfig.from_pretrained(str(folder))
    used = [what for field, what in UNSUPPORTED.items() if getattr(config, field, None)]
    if config.bias != "none":
        used.append(f"bias={config.bias!r}")
    if used:
        raise ValueError(f"uses {', '.join(used)}, which the runner does not apply (plain LoRA only)")
    return config


def _target(model, module_name: str, decoder_modules: set[int], base: str | None) -> torch.nn.Linear:
    """The Linear layer an adapter's module name points at, or a ValueError saying why not."""
    try:
        layer = model.get_submodule(module_name)
    except AttributeError:
        raise ValueError(f"targets {module_name}, which this model does not have (an adapter for "
                         f"another base model? its base: {base})") from None
    if not isinstance(layer, torch.nn.Linear):
        raise ValueError(f"targets {module_name}, a {type(layer).__name__} (LoRA is applied to Linear layers only)")
    if id(layer) not in decoder_modules:
        raise ValueError(f"targets {module_name}, outside the decoder (LoRA is applied inside the decoder "
                         "only: not to lm_head or a classification head)")
    return layer
