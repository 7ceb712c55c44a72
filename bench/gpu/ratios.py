"""The ratios `make bench` reports, on the GPU run's model and device: the plain batched forward
of the same workload (query+item for every item, one forward a request) and the bf16 matmul
ceiling, measured in-process right after the server's load run, so that the server's items/s can
be read as server / plain batched and as a fraction of the ceiling (bench/ceiling.py)."""
from __future__ import annotations

from pathlib import Path

import torch

from bench import offline
from bench.ceiling import measure_ceiling
from bench.workload import Workload, make_bodies


def measure_ratios(folder: Path, device: str, workload: Workload, server_items_per_s: float,
                   seed: int = 0, requests: int = 8) -> str:
    """Lines: the plain batched forward's items/s, the ceiling, and the server against both."""
    from server.model_loader import load_model

    model, _ = load_model(str(folder), torch.device(device), torch.bfloat16)
    workload = Workload(workload.num_items, workload.query_tokens, workload.item_tokens,
                        (0,), vocab_size=model.config.vocab_size)
    bodies = make_bodies(workload, requests + 1, seed)
    offline.plain_batched_scores(model, bodies[0])  # warm up: kernels, allocator
    plain = offline.measure_plain_batched(model, bodies[1:]).items_per_s
    ceiling = measure_ceiling(model, torch.bfloat16, workload.query_tokens, workload.item_tokens,
                              workload.num_items)
    return "\n".join([
        f"plain batched forward (bfloat16, in-process, {requests} requests): {plain:.2f} items/s",
        f"bfloat16 matmul ceiling: {ceiling.matmul_gflops:.0f} GFLOP/s -> "
        f"{ceiling.items_per_s:.1f} items/s at {ceiling.tokens_per_item:.0f} tokens per item",
        f"server / plain batched forward: {server_items_per_s / plain:.2f}x",
        f"fraction of the ceiling: server {ceiling.fraction(server_items_per_s):.2f}, "
        f"plain batched {ceiling.fraction(plain):.2f}",
    ])
