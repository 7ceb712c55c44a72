"""QueryCache on small tensors (no model): exact hits, the LRU budget, entries held by live
requests, and the longest usable head (any common head of an entry that kept every key; only a
whole entry when a sliding layer dropped keys)."""
from __future__ import annotations

import pytest
import torch

from server.query_cache import QueryCache, common_prefix_len, usable_head_len


def kv(num_tokens: int, kept: tuple[int | None, ...] = (None, None)):
    """Per layer (keys, values) [1, 2, kept, 4]; a layer's `kept` None holds every token; keys
    count positions so that a slice shows which tokens it holds."""
    layers = []
    for window_kept in kept:
        n = num_tokens if window_kept is None else min(num_tokens, window_kept)
        keys = torch.arange(num_tokens - n, num_tokens, dtype=torch.float32).view(1, 1, n, 1)
        layers.append((keys.expand(1, 2, n, 4).clone(), -keys.expand(1, 2, n, 4).clone()))
    return tuple(layers)


def ids(*tokens: int) -> tuple[int, ...]:
    return tuple(tokens)


@pytest.mark.parametrize("a, b, expected", [
    ((), (1, 2), 0),
    ((1, 2, 3), (1, 2, 3), 3),
    ((1, 2, 3), (1, 2, 4), 2),
    ((1, 2), (1, 2, 3, 4), 2),
    ((5,), (1,), 0),
    (tuple(range(1000)), tuple(range(999)) + (7,), 999),
], ids=["empty", "equal", "differ-last", "head", "differ-first", "long"])
def test_common_prefix_len(a, b, expected):
    assert common_prefix_len(a, b) == expected == common_prefix_len(b, a)


@pytest.mark.parametrize("entry, is_whole, query, expected", [
    ((1, 2, 3), True, (1, 2, 3, 4, 5), 3),    # the entry is a head of the query
    ((1, 2, 3), False, (1, 2, 3, 4, 5), 3),   # ... whole or not
    ((1, 2, 3, 9), True, (1, 2, 3, 4), 3),    # a shared head of a whole entry: sliced
    ((1, 2, 3, 9), False, (1, 2, 3, 4), 0),   # a sliding layer dropped keys the head needs
    ((1, 2, 3, 4, 5), True, (1, 2, 3), 2),    # the query is a head of it: one token left to compute
    ((1, 2, 3), True, (1, 2, 3), 2),          # (an exact hit is get()'s job)
    ((7, 8), True, (1, 2, 3), 0),
], ids=["head-whole", "head-sliding", "shared-whole", "shared-sliding", "query-is-head",
        "equal", "nothing-shared"])
def test_usable_head_len(entry, is_whole, query, expected):
    assert usable_head_len(entry, is_whole, query) == expected


def test_an_exact_query_is_a_hit_held_by_the_request():
    cache = QueryCache(max_tokens=100)
    tensors = kv(3)
    cache.add(1, ids(1, 2, 3), tensors)
    assert cache.get(2, ids(1, 2, 3)) is tensors
    assert cache.get(2, ids(1, 2)) is None
    assert (len(cache), cache.num_tokens, cache.num_held_tokens) == (1, 3, 3)
    cache.keep_only(())
    assert (len(cache), cache.num_tokens, cache.num_held_tokens) == (1, 3, 0)


def test_idle_entries_leave_least_recently_used_first_once_over_budget():
    cache = QueryCache(max_tokens=10)
    for rid, first in enumerate((10, 20, 30), start=1):  # 4 tokens each
        cache.add(rid, ids(first, 1, 2, 3), kv(4))
    assert cache.num_tokens == 12  # over the budget, but every entry is held
    cache.get(4, ids(10, 1, 2, 3))  # 10 is now the most recently used
    cache.keep_only(())
    assert cache.num_tokens == 8 <= cache.max_tokens
    assert cache.get(5, ids(20, 1, 2, 3)) is None  # the least recently used went
    assert cache.get(5, ids(10, 1, 2, 3)) is not None and cache.get(6, ids(30, 1, 2, 3)) is not None


def test_a_held_entry_is_never_evicted_under_its_request():
    cache = QueryCache(max_tokens=5)
    cache.add(1, ids(1, 2, 3, 4), kv(4))
    cache.add(2, ids(5, 6, 7, 8), kv(4))  # 8 > 5, but both held
    assert len(cache) == 2
    cache.keep_only({2})
    assert cache.get(3, ids(1, 2, 3, 4)) is None
    assert cache.get(3, ids(5, 6, 7, 8)) is not None
    cache.add(4, ids(9, 9, 9), kv(3))
    assert len(cache) == 2 and cache.num_tokens == 7  # both still held (by 2 or 3, and 4)


def test_a_zero_budget_keeps_a_query_only_while_held():
    cache = QueryCache(max_tokens=0)
    cache.add(1, ids(1, 2), kv(2))
    assert cache.get(2, ids(1, 2)) is not None  # a concurrent request shares it
    cache.keep_only({2})
    assert len(cache) == 1
    cache.keep_only(())
    assert (len(cache), cache.num_tokens) == (0, 0)


def test_the_longest_head_is_a_slice_of_a_whole_entry():
    cache = QueryCache(max_tokens=100)
    cache.add(1, ids(1, 2, 3, 4, 5, 6), kv(6))
    cache.add(2, ids(1, 2, 9), kv(3))
    head_len, head = cache.longest_head(ids(1, 2, 3, 4, 7, 8))
    assert head_len == 4
    for keys, values in head:
        assert keys.shape == (1, 2, 4, 4) and keys[0, 0, :, 0].tolist() == [0, 1, 2, 3]
        assert torch.equal(values, -keys)


def test_with_sliding_layers_only_a_whole_entry_is_a_head():
    cache = QueryCache(max_tokens=100)
    sliding = (None, 3)  # a full layer, then a sliding one keeping the last 3 keys
    cache.add(1, ids(1, 2, 3, 4, 5, 6), kv(6, sliding))
    assert cache.longest_head(ids(1, 2, 3, 4, 7, 8)) == (0, None)  # needs keys it dropped
    cache.add(2, ids(1, 2, 3, 4), kv(4, sliding))
    head_len, head = cache.longest_head(ids(1, 2, 3, 4, 7, 8))
    assert head_len == 4
    assert [keys.shape[2] for keys, _ in head] == [4, 3]  # the entry as it is


def test_a_short_entry_under_its_window_kept_every_key_and_is_sliced():
    cache = QueryCache(max_tokens=100)
    cache.add(1, ids(1, 2, 3), kv(3, (None, 5)))  # 3 tokens under a window keeping 5: all kept
    head_len, head = cache.longest_head(ids(1, 2, 8))
    assert head_len == 2 and [keys.shape[2] for keys, _ in head] == [2, 2]


def test_no_head_when_nothing_is_shared():
    cache = QueryCache(max_tokens=100)
    cache.add(1, ids(5, 6), kv(2))
    assert cache.longest_head(ids(1, 2, 3)) == (0, None)
    assert QueryCache(0).longest_head(ids(1, 2)) == (0, None)


def test_the_head_used_counts_as_recently_used():
    cache = QueryCache(max_tokens=8)
    cache.add(1, ids(1, 2, 3, 4), kv(4))
    cache.add(2, ids(9, 8, 7, 6), kv(4))
    cache.longest_head(ids(1, 2, 3, 4, 5))
    cache.keep_only(())
    cache.add(3, ids(4, 4), kv(2))  # 10 > 8: the least recently used idle entry goes
    assert cache.get(4, ids(9, 8, 7, 6)) is None and cache.get(4, ids(1, 2, 3, 4)) is not None


def test_clear_forgets_idle_entries_only():
    cache = QueryCache(max_tokens=100)
    cache.add(1, ids(1, 2), kv(2))
    cache.add(2, ids(3, 4), kv(2))
    cache.keep_only({2})
    cache.clear()
    assert len(cache) == 1 and cache.get(3, ids(3, 4)) is not None


def test_a_negative_budget_is_refused():
    with pytest.raises(ValueError, match="max_tokens must be >= 0"):
        QueryCache(-1)
