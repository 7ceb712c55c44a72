"""Tiny LoRA adapters built with peft in a test, and the scores a merged-weights transformers
forward gives through one (the reference the server's per-row adapters must equal)."""
from __future__ import annotations

import copy
from pathlib import Path

import torch

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def save_adapter(base_model, folder: Path, seed: int, rank: int = 4, alpha: int = 8, **settings) -> Path:
    """A LoRA adapter of a copy of `base_model`, saved as PEFT saves it. lora_B is drawn at random:
    PEFT initialises it to zero, and an adapter that changes nothing would prove nothing."""
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


def merged_model(base_model, folder: Path | None):
    """`base_model` with the adapter in `folder` merged into its weights (peft's merge_and_unload);
    None: the base model itself."""
    if folder is None:
        return base_model
    from peft import PeftModel

    return PeftModel.from_pretrained(copy.deepcopy(base_model), str(folder)).merge_and_unload().eval()


def reference_scores(model, ids: list[int], label_ids: tuple[int, ...], apply_softmax: bool) -> list[float]:
    """A plain forward over the whole sequence: the last token's label probabilities (over the
    vocabulary, or a softmax over the labels' logits)."""
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0, -1].float()
    labels = list(label_ids)
    if apply_softmax:
        return torch.softmax(logits[labels], dim=-1).tolist()
    return torch.softmax(logits, dim=-1)[labels].tolist()
