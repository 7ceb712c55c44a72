"""The scores a merged-weights transformers forward gives through a LoRA adapter (peft's
merge_and_unload): the reference the server's per-row adapters must equal. The adapters themselves:
bench.lora_models.save_adapter."""
from __future__ import annotations

import copy
from pathlib import Path

import torch


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
