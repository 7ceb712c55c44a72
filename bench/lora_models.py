"""Random LoRA adapters built with peft, saved as PEFT saves them, for the benchmarks and the tests
(as classifier_models.py builds classifiers): no hub, no training."""
from __future__ import annotations

import copy
from pathlib import Path

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def save_adapter(base_model, folder: Path, seed: int, rank: int = 4, alpha: int = 8, **settings) -> Path:
    """A LoRA adapter of a copy of `base_model` (every projection of every layer unless
    `target_modules` says otherwise), saved to `folder`. lora_B is drawn at random: PEFT
    initialises it to zero, and an adapter that changes nothing would prove and cost nothing."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    settings = {"target_modules": TARGETS, **settings}
    peft_model = get_peft_model(copy.deepcopy(base_model), LoraConfig(r=rank, lora_alpha=alpha, **settings))
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.5)
    peft_model.save_pretrained(folder)
    return folder
