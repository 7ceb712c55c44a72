"""The runner's batch layout masks, by position: prefix slots kept under a window, padding,
causality and the window's edge (q - k < window)."""
from __future__ import annotations

import pytest
import torch

from server.attention_masks import additive_mask, key_positions, num_kept


@pytest.mark.parametrize("prefix_len, window, expected", [
    (10, None, 10),  # full attention keeps every prefix key
    (10, 4, 3),      # the first own token (position 10) sees positions 7, 8, 9 and itself
    (2, 4, 2),       # a prefix shorter than the window is kept whole
    (0, 4, 0),
], ids=["full", "window-shorter-than-prefix", "prefix-shorter-than-window", "no-prefix"])
def test_num_kept(prefix_len, window, expected):
    assert num_kept(prefix_len, window) == expected


def test_key_positions_hold_the_kept_prefix_tail_then_own_tokens():
    positions, is_real = key_positions([10, 1], [2, 3], max_own=3, window=4)
    # Row 0 keeps prefix positions 7-9, row 1 its one prefix token (slot 1-2 padding).
    assert positions.tolist() == [[7, 8, 9, 10, 11, 12], [0, 1, 2, 1, 2, 3]]
    assert is_real.tolist() == [[True, True, True, True, True, False],
                                [True, False, False, True, True, True]]


def attends(mask: torch.Tensor) -> list[list[list[int]]]:
    return (mask[:, 0] == 0).int().tolist()


def test_a_window_hides_keys_as_far_back_as_the_window():
    mask = additive_mask([10], [3], max_own=3, window=4, dtype=torch.float32)
    # Key positions 7, 8, 9 | 10, 11, 12; queries at 10, 11, 12.
    assert attends(mask) == [[[1, 1, 1, 1, 0, 0],
                              [0, 1, 1, 1, 1, 0],   # 7 is 4 back from 11: outside
                              [0, 0, 1, 1, 1, 1]]]


def test_full_attention_sees_the_whole_prefix_but_no_padding():
    mask = additive_mask([2, 1], [1, 2], max_own=2, window=None, dtype=torch.float32)
    assert attends(mask) == [[[1, 1, 1, 0],
                              [1, 1, 1, 1]],   # a padding query: its past and its own slot
                             [[1, 0, 1, 0],
                              [1, 0, 1, 1]]]
    assert mask.min().item() == torch.finfo(torch.float32).min
