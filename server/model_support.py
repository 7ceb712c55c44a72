"""Which models the runner scores exactly, and what their attention looks like to it.

The runner lays shared prefixes and items out in its own padded cache with its own masks, so it can
only serve models whose every layer it can mask itself: causal full or sliding-window attention.
The allowlist below is what tests/server/test_model_zoo.py proves exact; everything else is refused
at load time with a reason (chunked, linear or bidirectional attention, length-dependent RoPE ...).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    masks_by_layer_type: bool  # the decoder takes {layer_type: mask}; else one mask for all layers


# model_type -> how its decoder takes masks (checked against the installed transformers' modeling).
FAMILIES = {
    "llama": Family(masks_by_layer_type=False),
    "mistral": Family(masks_by_layer_type=False),      # one window for every layer, or none
    "phi3": Family(masks_by_layer_type=False),         # likewise
    "qwen2": Family(masks_by_layer_type=True),         # sliding layers above max_window_layers
    "qwen3": Family(masks_by_layer_type=True),
    "gemma": Family(masks_by_layer_type=False),
    "gemma2": Family(masks_by_layer_type=True),        # alternating sliding/full, soft-capping
    "gemma3_text": Family(masks_by_layer_type=True),   # 5 sliding : 1 full, local RoPE base
    "gpt_oss": Family(masks_by_layer_type=True),       # alternating, attention sinks, MoE
}
LAYER_WINDOWS = {"full_attention": False, "sliding_attention": True}  # layer type -> has a window
# RoPE variants whose frequencies depend on the longest position in the batch, not on the token.
LENGTH_DEPENDENT_ROPE = {"dynamic", "longrope"}
MASKING_ATTENTION = {"eager", "sdpa"}  # implementations that honour a prepared 4D mask


def unsupported_reason(config) -> str | None:
    """None if the runner scores this (decoder) config exactly; else what is unsupported."""
    model_type = getattr(config, "model_type", None)
    if model_type not in FAMILIES:
        return (f"model type '{model_type}' is not one the runner is proven exact on (supported: "
                f"{', '.join(sorted(FAMILIES))})")
    layer_types = set(getattr(config, "layer_types", None) or ["full_attention"])
    odd_layers = sorted(layer_types - set(LAYER_WINDOWS))
    if odd_layers:
        return f"layer types {odd_layers} (only full and sliding-window attention are supported)"
    if getattr(config, "attention_chunk_size", None):
        return "chunked attention (attention_chunk_size) is not supported"
    is_causal = getattr(config, "is_causal", True)
    if getattr(config, "use_bidirectional_attention", False) or not is_causal:
        return "bidirectional (non-causal) attention is not supported"
    rope = sorted(rope_types(config) & LENGTH_DEPENDENT_ROPE)
    if rope:
        return f"RoPE type {rope} rescales with the batch's longest sequence; not supported"
    implementation = getattr(config, "_attn_implementation", None) or "eager"
    if implementation not in MASKING_ATTENTION:
        return (f"attention implementation '{implementation}' ignores the runner's masks; "
                "use sdpa or eager")
    return None


def rope_types(config) -> set[str]:
    """The RoPE types in use; rope_parameters may be flat or keyed by layer type (Gemma 3)."""
    params = getattr(config, "rope_parameters", None) or {}
    nested = [value for value in params.values() if isinstance(value, dict)]
    return {part.get("rope_type", "default") for part in (nested or [params])}


def layer_windows(config) -> dict[str, int | None]:
    """Mask key -> sliding window in tokens (None: full causal). With masks_by_layer_type the keys
    are the config's layer types; else one key, "", whose mask every layer gets."""
    window = getattr(config, "sliding_window", None)
    if not FAMILIES[config.model_type].masks_by_layer_type:
        return {"": window}
    layer_types = set(getattr(config, "layer_types", None) or ["full_attention"])
    return {kind: window if LAYER_WINDOWS[kind] else None for kind in layer_types}


def layer_mask_keys(config) -> list[str]:
    """Per decoder layer, the key of its mask (and window) in layer_windows()."""
    if not FAMILIES[config.model_type].masks_by_layer_type:
        return [""] * config.num_hidden_layers
    layer_types = getattr(config, "layer_types", None)
    return list(layer_types or ["full_attention"] * config.num_hidden_layers)


def final_logit_softcap(config) -> float | None:
    """Gemma 2/3 squash the logits after lm_head (cap * tanh(logits / cap)) in ForCausalLM."""
    return getattr(config, "final_logit_softcapping", None)
