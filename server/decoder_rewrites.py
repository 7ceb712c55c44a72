"""Rewrites of a transformers decoder that a compiled graph runs faster, each computing the same:
applied by compiled_forward before it compiles (never with LoRA adapters: their hooks sit on the
projections that `fuse_gate_up` calls through one matmul).

- `realize_rotary_tables`: the rotary embedding's cos and sin tables leave the rotary module
  through an opaque op, so inductor keeps them as two buffers. Without it inductor inlines the
  tables, cheap pointwise ops to its heuristics, into every layer's query and key rotation: each
  layer computed cos and sin again for every element of every head (bf16 on AMX, the default
  model: over a quarter of the fused kernels' time). With it they are also rounded to the model's
  dtype, as the eager forward rounds them.
- `fuse_gate_up`: a gated MLP's gate and up projections as one matmul over their weights stacked
  (the two weights become views of the stacked one: no copy kept). One [tokens, 2 x intermediate]
  product keeps the matrix units busier than two half as wide: at 1,980 tokens of the default
  model in bf16, 3.1 ms against 3.7 in the compiled forward. Inductor's SiLU * up kernel then
  writes a buffer of its own instead of the gate's in place, which takes back most of that
  (docs/performance.md: within the noise end to end).
"""
from __future__ import annotations

import logging
import types

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

ROTARY_SUFFIX = "RotaryEmbedding"  # transformers' rotary modules: forward(x, position_ids) -> (cos, sin)
PROBE_TOKENS = 3


@torch.library.custom_op("scoringfleet::realized", mutates_args=())
def realized(tensor: torch.Tensor) -> torch.Tensor:
    """A copy that inductor cannot see into: what comes out of it is a buffer of its own."""
    return tensor.clone()


@realized.register_fake
def _(tensor):
    return torch.empty_like(tensor)


def _realize_outputs(module, args, output):
    if isinstance(output, tuple) and all(isinstance(part, torch.Tensor) for part in output):
        return tuple(realized(part) for part in output)
    return output


def realize_rotary_tables(decoder: torch.nn.Module) -> int:
    """Pass every rotary module's (cos, sin) through `realized` (idempotent); returns how many
    modules do."""
    count = 0
    for module in decoder.modules():
        if type(module).__name__.endswith(ROTARY_SUFFIX):
            if not getattr(module, "_scoringfleet_realized", False):
                module.register_forward_hook(_realize_outputs)
                module._scoringfleet_realized = True
            count += 1
    return count


def fuse_gate_up(decoder: torch.nn.Module) -> int:
    """Fuse the gate and up projections of every gated MLP whose forward is
    down(act(gate(x)) * up(x)), checked on a random probe once per MLP class, so that a family
    whose MLP computes anything else keeps its own forward (idempotent); returns how many MLPs
    are fused."""
    checked: dict[type, bool] = {}
    count = 0
    for module in decoder.modules():
        if hasattr(module, "_scoringfleet_gate_up"):
            count += 1
            continue
        if not _is_gated_mlp(module):
            continue
        kind = type(module)
        if kind not in checked:
            checked[kind] = _fused_forward_matches(module)
            if not checked[kind]:
                log.info("%s: its forward is not down(act(gate) * up); its projections stay apart", kind.__name__)
        if checked[kind]:
            _fuse(module)
            count += 1
    return count


def _is_gated_mlp(module: torch.nn.Module) -> bool:
    gate, up, down = (getattr(module, name, None) for name in ("gate_proj", "up_proj", "down_proj"))
    if not all(isinstance(linear, torch.nn.Linear) for linear in (gate, up, down)):
        return False
    return (callable(getattr(module, "act_fn", None)) and gate.bias is None and up.bias is None
            and gate.weight.shape == up.weight.shape and gate.weight.dtype == up.weight.dtype)


def _fused_forward(self, x: torch.Tensor) -> torch.Tensor:
    return _gated(self, x, self._scoringfleet_gate_up)


def _gated(module: torch.nn.Module, x: torch.Tensor, gate_up: torch.Tensor) -> torch.Tensor:
    """down(act(gate(x)) * up(x)) with gate and up as one matmul over their stacked weights."""
    gate, up = F.linear(x, gate_up).chunk(2, dim=-1)
    return module.down_proj(module.act_fn(gate) * up)


@torch.no_grad()
def _fused_forward_matches(module: torch.nn.Module) -> bool:
    weight = module.gate_proj.weight
    probe = torch.randn(1, PROBE_TOKENS, weight.shape[1], dtype=weight.dtype, device=weight.device)
    try:
        expected = module(probe)
    except (TypeError, RuntimeError, ValueError):  # a forward that takes more than the hidden states
        return False
    got = _gated(module, probe, torch.cat([weight, module.up_proj.weight]))
    tolerance = 1e-5 if weight.dtype == torch.float32 else 2e-2
    return torch.allclose(got, expected, rtol=tolerance, atol=tolerance * float(expected.abs().max()))


def _fuse(module: torch.nn.Module) -> None:
    gate, up = module.gate_proj, module.up_proj
    stacked = torch.cat([gate.weight.detach(), up.weight.detach()])
    rows = gate.weight.shape[0]
    gate.weight.data, up.weight.data = stacked[:rows], stacked[rows:]
    # NOTE: a parameter, not a plain tensor attribute: dynamo keeps parameters' shapes static,
    # while a plain tensor's would be symbolic under dynamic=True, and inductor's SiLU * up loop
    # then computes the split's offsets per element (measured slower than the two matmuls apart).
    module.register_parameter("_scoringfleet_gate_up", torch.nn.Parameter(stacked, requires_grad=False))
    module.forward = types.MethodType(_fused_forward, module)
