"""Attention masks for the runner's batch layout, built from true token positions.

Layout per row and layer type: the first key slots hold the row's prefix keys that layer keeps
(all, or the last window - 1 under a sliding window), right-padded; then its own tokens,
right-padded; query i is own token i. A slot's index is not its position, so transformers'
index-based masks cannot be used: windows are measured here between true token positions.
"""
from __future__ import annotations

from typing import Sequence as Seq

import torch


def num_kept(prefix_len: int, window: int | None) -> int:
    """Prefix keys a token after the prefix can still see: all of them, or under a sliding window
    only the last window - 1 (those less than `window` positions back from the prefix's end)."""
    return prefix_len if window is None else min(prefix_len, window - 1)


def key_positions(prefix_lens: Seq[int], own_lens: Seq[int], max_own: int,
                  window: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions [batch, slots], is_real [batch, slots]) of every key slot of the layout: each
    row's kept prefix keys (num_kept), right-padded to the longest, then its own tokens."""
    prefix = torch.tensor(prefix_lens).unsqueeze(1)
    kept = torch.tensor([num_kept(n, window) for n in prefix_lens]).unsqueeze(1)
    own = torch.tensor(own_lens).unsqueeze(1)
    num_prefix_slots = int(kept.max())
    slot = torch.arange(num_prefix_slots + max_own).unsqueeze(0)
    is_prefix = slot < num_prefix_slots
    positions = torch.where(is_prefix, prefix - kept + slot, prefix + slot - num_prefix_slots)
    is_real = torch.where(is_prefix, slot < kept, slot - num_prefix_slots < own)
    return positions, is_real


def additive_mask(prefix_lens: Seq[int], own_lens: Seq[int], max_own: int, window: int | None,
                  dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """[batch, 1, max_own, prefix slots + max_own]: 0 where a query attends, the dtype's minimum
    elsewhere. A query sees real keys at or before its position, and with a window only those
    less than `window` positions back (transformers' convention: q - k < window). Every query
    also sees its own slot, so padding queries never have an empty row (no NaN can arise there
    and flow on through later layers). Built on `device`: only the small [batch, slots] positions
    are copied there, not the [batch, q, k] mask."""
    positions, is_real = key_positions(prefix_lens, own_lens, max_own, window)
    positions, is_real = positions.to(device), is_real.to(device)
    num_prefix_slots = positions.shape[1] - max_own
    query_positions = positions[:, num_prefix_slots:].unsqueeze(2)   # [batch, q, 1]
    distance = query_positions - positions.unsqueeze(1)                # [batch, q, k]
    allowed = is_real.unsqueeze(1) & (distance >= 0)
    if window is not None:
        allowed &= distance < window
    own_slot = torch.arange(max_own, device=device).unsqueeze(1) + num_prefix_slots
    allowed |= own_slot == torch.arange(positions.shape[1], device=device)
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask.unsqueeze(1)
