"""The machine's arithmetic ceiling for a model, measured in the same run as the paths it bounds.

A prefill is almost all linear layers: each computed token costs 2 FLOPs per linear weight of the
decoder (embeddings are a lookup; the LM head runs at one position per item and is left out, as
attention is: both are small next to the linears at these lengths). The ceiling is the items/s a
path would reach if every one of those FLOPs ran at the speed of one model-shaped matmul
(tokens x hidden @ hidden x intermediate, the MLP's up projection) in the given dtype. A path's
fraction of that ceiling says how much of the machine it uses, whatever else loads the machine at
the moment, as long as the matmul is timed next to it.
"""
from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class Ceiling:
    dtype: str
    matmul_gflops: float          # GFLOP/s of the model-shaped matmul, best of the timed runs
    flops_per_token: float        # 2 x linear weights of the decoder
    tokens_per_item: float        # what the server computes per item: item + query / items

    @property
    def items_per_s(self) -> float:
        return self.matmul_gflops * 1e9 / (self.flops_per_token * self.tokens_per_item)

    def fraction(self, items_per_s: float) -> float:
        return items_per_s / self.items_per_s


def processor(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name, its core count and torch's view of it (vector ISA, native bf16): the
    line a table of these figures is kept under."""
    try:
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]
    except OSError:
        names = []
    name = names[0] if names else platform.processor() or "unknown CPU"
    bf16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return (f"{name}, {len(names) or '?'} logical CPUs, torch {torch.__version__} "
            f"({torch.backends.cpu.get_cpu_capability()}, native bf16: {'yes' if bf16 else 'no'})")


def linear_weights(model) -> int:
    """Weights of the decoder's linear layers (no embeddings, no LM head, no norms)."""
    decoder = model.get_decoder()
    return sum(module.weight.numel() for module in decoder.modules()
               if isinstance(module, torch.nn.Linear))


def matmul_shape(model, tokens: int) -> tuple[int, int, int]:
    """(m, k, n) of the MLP's up projection over `tokens` rows: the shape the prefill spends most
    of its time in."""
    config = model.config
    return tokens, config.hidden_size, config.intermediate_size


def matmul_gflops(m: int, k: int, n: int, dtype: torch.dtype, device: str = "cpu",
                  seconds: float = 1.0) -> float:
    """GFLOP/s of [m, k] @ [k, n] in `dtype`: the best of ~`seconds` worth of timed batches
    (best, not mean: the ceiling is what the machine can do, not what a busy neighbour left)."""
    a = torch.randn(m, k, device=device).to(dtype)
    b = torch.randn(k, n, device=device).to(dtype)
    flops = 2.0 * m * k * n
    for _ in range(3):  # warm up: weight packing, thread pool, clocks
        torch.mm(a, b)
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        for _ in range(5):
            torch.mm(a, b)
        if device != "cpu":
            torch.cuda.synchronize()
        best = max(best, 5 * flops / (time.perf_counter() - start))
    return best / 1e9


def measure_ceiling(model, dtype: torch.dtype, query_tokens: int, item_tokens: int,
                    num_items: int, tokens: int = 3000, seconds: float = 1.0) -> Ceiling:
    """The ceiling of `model` in `dtype` for requests of that shape, timed now."""
    device = str(next(model.parameters()).device)
    gflops = matmul_gflops(*matmul_shape(model, tokens), dtype, device, seconds)
    return Ceiling(str(dtype).removeprefix("torch."), gflops, 2.0 * linear_weights(model),
                   item_tokens + query_tokens / num_items)
