"""Attention masks for the runner's batch layout, built from true token positions.

Layout per row: key slots [0, max_prefix) hold the row's prefix (right-padded), slots
[max_prefix, max_prefix + max_own) its own tokens (right-padded); query i is own token i. A slot's
index is not its position, so transformers' index-based masks cannot be used: windows are measured
here between the positions the tokens have in the unpadded sequence.
"""
from __future__ import annotations

from typing import Sequence as Seq

import torch


def key_positions(prefix_lens: Seq[int], own_lens: Seq[int], max_prefix: int,
                  max_own: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions [batch, slots], is_real [batch, slots]) of every key slot of the layout."""
    prefix = torch.tensor(prefix_lens).unsqueeze(1)
    own = torch.tensor(own_lens).unsqueeze(1)
    slot = torch.arange(max_prefix + max_own).unsqueeze(0)
    is_prefix = slot < max_prefix
    positions = torch.where(is_prefix, slot, prefix + slot - max_prefix)
    is_real = torch.where(is_prefix, slot < prefix, slot - max_prefix < own)
    return positions, is_real


def additive_mask(prefix_lens: Seq[int], own_lens: Seq[int], max_prefix: int, max_own: int,
                  window: int | None, dtype: torch.dtype) -> torch.Tensor:
    """[batch, 1, max_own, max_prefix + max_own]: 0 where a query attends, the dtype's minimum
    elsewhere. A query sees real keys at or before its position, and with a window only those
    less than `window` positions back (transformers' convention: q - k < window). Every query
    also sees its own slot, so padding queries never have an empty row (no NaN can arise there
    and flow on through later layers)."""
    positions, is_real = key_positions(prefix_lens, own_lens, max_prefix, max_own)
    query_positions = positions[:, max_prefix:].unsqueeze(2)       # [batch, q, 1]
    distance = query_positions - positions.unsqueeze(1)              # [batch, q, k]
    allowed = is_real.unsqueeze(1) & (distance >= 0)
    if window is not None:
        allowed &= distance < window
    own_slot = torch.arange(max_own).unsqueeze(1) + max_prefix == torch.arange(positions.shape[1])
    allowed |= own_slot
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask.unsqueeze(1)
