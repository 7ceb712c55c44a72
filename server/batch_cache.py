"""The masked layout's batch cache: each row's query keys and values in one padded tensor per
layer, for a forward whose rows attend to them through additive masks (attention_masks.py). The
shared-prefix (cascade) layout needs none: it reads each request's query in place."""
from __future__ import annotations

from typing import Sequence as Seq

import torch

from server.query_cache import KV
from server.sequence import Sequence


def batch_cache(sequences: Seq[Sequence], prefix_cache: dict[int, KV], device: torch.device,
                ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) [batch, heads, slots, dim] per layer holding each row's kept prefix keys
    and values: fresh tensors right-padded with zeros that the masks hide (slots: the most
    kept), or, when every row shares one query, that query's tensors expanded."""
    rows_by_request: dict[int, list[int]] = {}
    for row, seq in enumerate(sequences):
        if seq.request.prefix_ids:
            rows_by_request.setdefault(seq.request.rid, []).append(row)
    # One row index per request, copied to the device once, not once per layer.
    if len(rows_by_request) == 1 and len(next(iter(rows_by_request.values()))) == len(sequences):
        # Every row shares one query: an expanded view, no copy here (the cache's own
        # concatenation with the items' keys is the one copy the forward needs).
        (rid,) = rows_by_request
        return [(keys.expand(len(sequences), -1, -1, -1), values.expand(len(sequences), -1, -1, -1))
                for keys, values in prefix_cache[rid]]
    filled = [(torch.tensor(rows, device=device), prefix_cache[rid])
              for rid, rows in rows_by_request.items()]
    layers = []
    for layer, (some_keys, _) in enumerate(filled[0][1]):
        heads, dim = some_keys.shape[1], some_keys.shape[3]
        num_slots = max(prefix[layer][0].shape[2] for _, prefix in filled)
        keys = some_keys.new_zeros(len(sequences), heads, num_slots, dim)
        values = some_keys.new_zeros(len(sequences), heads, num_slots, dim)
        for index, prefix in filled:
            prefix_keys, prefix_values = prefix[layer]
            keys[index, :, :prefix_keys.shape[2]] = prefix_keys  # broadcast over the rows
            values[index, :, :prefix_values.shape[2]] = prefix_values
        layers.append((keys, values))
    return layers  # a cache of full layers (compiled_forward): the masks do the windowing
