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
    """How a family's decoder masks, read from its modeling code in the installed transformers."""

    # The decoder takes {layer_type: mask}; config.layer_types says which layers slide (and the
    # config class derives it from use_sliding_window / max_window_layers / no_rope_layers).
    masks_by_layer_type: bool = False
    # One mask for every layer: the family's code applies config.sliding_window to all of them
    # (mistral and the like). False: always full causal, whatever the config carries.
    uses_sliding_window: bool = False
    # What ForCausalLM does to lm_head's output (final_logits): "softcap" (Gemma 2/3),
    # "divide_by_logits_scaling" (Granite), "times_logit_scale" (Cohere); None: nothing.
    logits: str | None = None

    def __post_init__(self) -> None:
        if self.logits not in FINAL_LOGITS:
            raise ValueError(f"unknown final logits step {self.logits!r}")


FINAL_LOGITS = {None, "softcap", "divide_by_logits_scaling", "times_logit_scale"}


# model_type -> how its decoder takes masks (checked against the installed transformers' modeling).
FAMILIES = {
    "llama": Family(),                                                  # full attention; a stray window is ignored
    "gemma": Family(),
    "olmo2": Family(),                                                  # q/k norms over the whole projection
    "granite": Family(logits="divide_by_logits_scaling"),               # embedding/residual/attention multipliers
    "glm4": Family(),                                                   # partial, interleaved RoPE
    "phi": Family(),                                                    # partial RoPE, parallel block, lm_head bias
    "cohere": Family(logits="times_logit_scale"),                       # parallel block, logit_scale
    "mistral": Family(uses_sliding_window=True),                        # one window for every layer, or none
    "phi3": Family(uses_sliding_window=True),
    "mixtral": Family(uses_sliding_window=True),                        # MoE: top-k routing per token
    "starcoder2": Family(uses_sliding_window=True),
    "qwen3_moe": Family(uses_sliding_window=True),                      # its config drops the window unless used
    "qwen2": Family(masks_by_layer_type=True),                          # sliding layers above max_window_layers
    "qwen3": Family(masks_by_layer_type=True),
    "qwen2_moe": Family(masks_by_layer_type=True),                      # MoE with a gated shared expert
    "smollm3": Family(masks_by_layer_type=True),                        # NoPE layers (no_rope_layers)
    "gemma2": Family(masks_by_layer_type=True, logits="softcap"),       # alternating sliding/full, soft-capping
    "gemma3_text": Family(masks_by_layer_type=True, logits="softcap"),  # 5 sliding : 1 full, local RoPE base
    "gpt_oss": Family(masks_by_layer_type=True),                        # alternating, attention sinks, MoE
}
LAYER_WINDOWS = {"full_attention": False, "sliding_attention": True}  # layer type -> has a window
# RoPE variants whose frequencies depend on the longest position in the batch, not on the token.
LENGTH_DEPENDENT_ROPE = {"dynamic", "longrope"}
# RoPE variants whose frequencies are fixed at load (transformers' ROPE_INIT_FUNCTIONS, less the two
# above); any other name is a malformed config, refused before the weights are read.
POSITION_LOCAL_ROPE = {"default", "linear", "yarn", "llama3", "proportional"}
MASKING_ATTENTION = {"eager", "sdpa"}  # implementations that honour a prepared 4D mask


def remote_code_reason(raw_config: dict, known_model_types: set[str]) -> str | None:
    """A config.json that only its own code can load (auto_map, a model type transformers does
    not have, e.g. internlm2): the server never runs a model's code. None otherwise."""
    model_type = raw_config.get("model_type")
    if model_type is None:
        return "its config has no model_type (is this a transformers model folder?)"
    if model_type not in known_model_types and raw_config.get("auto_map"):
        return (f"model type '{model_type}' needs the model's own code (auto_map: "
                f"trust_remote_code), which the server never runs")
    return None


def unsupported_reason(config) -> str | None:
    """None if the runner scores this (decoder) config exactly; else what is unsupported."""
    model_type = getattr(config, "model_type", None)
    if model_type not in FAMILIES:
        return (f"model type '{model_type}' is not one the runner is proven exact on (supported: "
                f"{', '.join(sorted(FAMILIES))})")
    reason = window_reason(config)
    if reason is not None:
        return reason
    if getattr(config, "attention_chunk_size", None):
        return "chunked attention (attention_chunk_size) is not supported"
    is_causal = getattr(config, "is_causal", True)
    if getattr(config, "use_bidirectional_attention", False) or not is_causal:
        return "bidirectional (non-causal) attention is not supported"
    rope = sorted(rope_types(config) & LENGTH_DEPENDENT_ROPE)
    if rope:
        return f"RoPE type {rope} rescales with the batch's longest sequence; not supported"
    unknown = sorted(rope_types(config) - POSITION_LOCAL_ROPE - LENGTH_DEPENDENT_ROPE)
    if unknown:
        return f"unknown RoPE type {unknown} (known: {', '.join(sorted(POSITION_LOCAL_ROPE))})"
    implementation = getattr(config, "_attn_implementation", None) or "eager"
    if implementation not in MASKING_ATTENTION:
        return (f"attention implementation '{implementation}' ignores the runner's masks; "
                "use sdpa or eager")
    return None


def window_reason(config) -> str | None:
    """Layer types the runner cannot mask, or a sliding layer without a usable window."""
    family = FAMILIES[config.model_type]
    if not (family.masks_by_layer_type or family.uses_sliding_window):
        return None  # full causal attention whatever the config says
    layer_types = set(_layer_types(config)) if family.masks_by_layer_type else set()
    odd_layers = sorted(layer_types - set(LAYER_WINDOWS))
    if odd_layers:
        return f"layer types {odd_layers} (only full and sliding-window attention are supported)"
    window = getattr(config, "sliding_window", None)
    slides = "sliding_attention" in layer_types or (family.uses_sliding_window and window is not None)
    if slides and not (isinstance(window, int) and window > 0):
        return f"sliding-window layers with sliding_window={window!r} (a positive integer is needed)"
    return None


def rope_types(config) -> set[str]:
    """The RoPE types in use; rope_parameters may be flat or keyed by layer type (Gemma 3)."""
    params = getattr(config, "rope_parameters", None) or {}
    nested = [value for value in params.values() if isinstance(value, dict)]
    return {part.get("rope_type", "default") for part in (nested or [params])}


def _layer_types(config) -> list[str]:
    return list(getattr(config, "layer_types", None) or
                ["full_attention"] * config.num_hidden_layers)


def layer_windows(config) -> dict[str, int | None]:
    """Mask key -> sliding window in tokens (None: full causal), as the family's own code masks.
    With masks_by_layer_type the keys are the config's layer types; else one key, "", whose mask
    every layer gets. A window key on a family that never slides (Llama, Gemma ...) is ignored."""
    family = FAMILIES[config.model_type]
    window = getattr(config, "sliding_window", None)
    if not family.masks_by_layer_type:
        return {"": window if family.uses_sliding_window else None}
    return {kind: window if LAYER_WINDOWS[kind] else None for kind in set(_layer_types(config))}


def layer_mask_keys(config) -> list[str]:
    """Per decoder layer, the key of its mask (and window) in layer_windows()."""
    if not FAMILIES[config.model_type].masks_by_layer_type:
        return [""] * config.num_hidden_layers
    return _layer_types(config)


def final_logits(config, logits):
    """lm_head's output as the family's ForCausalLM returns it (in the logits' dtype)."""
    kind = FAMILIES[config.model_type].logits
    if kind == "divide_by_logits_scaling":
        return logits / config.logits_scaling
    if kind == "times_logit_scale":
        return logits * config.logit_scale
    cap = getattr(config, "final_logit_softcapping", None) if kind == "softcap" else None
    if cap is not None:
        return (logits / cap).tanh() * cap
    return logits
