"""QueryCache: queries' key/value tensors kept across requests, least recently used out first.

Keyed by the LoRA adapter the query went through ("" for the base model: an adapter changes every
layer's keys and values, so one adapter's query never stands for another's, nor for a head of it)
and the query's exact token ids as laid out (BOS included); an entry holds, per layer, (keys,
values) [1, heads, n, dim]: all n keys on full-attention layers, the last window - 1 on sliding
ones (what a later token can still see). Entries held by live requests are never evicted; the
rest are bounded by a token budget. The cache holds tensors but computes nothing: the runner
computes a query (or the part after its longest cached head) and adds it here. Not thread-safe:
the runner's run() and keep_only() are never concurrent (the engine's loop).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable

import torch

KV = tuple[tuple[torch.Tensor, torch.Tensor], ...]  # per layer (keys, values): [1, heads, n, dim]
Key = tuple[str, tuple[int, ...]]  # (adapter, "" for the base model; the query's ids)


@dataclass(eq=False)
class Entry:
    kv: KV
    num_tokens: int
    # True if every layer kept every key (no sliding layer dropped any): then any head of this
    # query is a slice of it; otherwise only the whole query can stand for a head.
    is_whole: bool
    holders: set[int] = field(default_factory=set)  # ids of the live requests using it

    @classmethod
    def of(cls, kv: KV, num_tokens: int) -> Entry:
        return cls(kv, num_tokens, all(keys.shape[2] == num_tokens for keys, _ in kv))


def common_prefix_len(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """Length of the longest common head of two id tuples (binary search over C-speed slice
    compares, not a Python loop over tokens)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def usable_head_len(entry_ids: tuple[int, ...], is_whole: bool, ids: tuple[int, ...]) -> int:
    """Tokens of `ids` (strictly fewer than all) that an entry for `entry_ids` can stand for: its
    common head with `ids` if the entry kept every key, else the entry itself when it is a head of
    `ids` (a sliding layer dropped the keys a shorter head would need), else 0."""
    common = common_prefix_len(entry_ids, ids)
    if common == len(ids):
        common -= 1  # a head leaves at least one token to compute (an exact hit is get())
    if is_whole or common == len(entry_ids):
        return common
    return 0


def head_of(kv: KV, num_tokens: int, head_len: int) -> KV:
    """The first head_len tokens of an entry of num_tokens: the entry itself, or views of a whole
    entry's first head_len keys (no copy: the runner's forward concatenates them anew)."""
    if head_len == num_tokens:
        return kv
    return tuple((keys[:, :, :head_len], values[:, :, :head_len]) for keys, values in kv)


class QueryCache:
    def __init__(self, max_tokens: int) -> None:
        """max_tokens: the most query tokens kept. Entries held by live requests are kept even
        beyond it (their items need them; the scheduler's max_total_tokens bounds those) and the
        idle ones go; 0: a query is kept only while a request holds it."""
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
        self.max_tokens = max_tokens
        self._entries: OrderedDict[Key, Entry] = OrderedDict()  # least recent first
        self._held: dict[int, Key] = {}  # request id -> the query it holds
        self.num_tokens = 0  # over all entries; kept here so a scrape thread reads one int

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def num_held_tokens(self) -> int:
        return sum(entry.num_tokens for entry in self._entries.values() if entry.holders)

    def has(self, ids: tuple[int, ...], adapter: str = "") -> bool:
        """Whether the query through `adapter` is cached (a look only: nothing held or used)."""
        return (adapter, ids) in self._entries

    def get(self, rid: int, ids: tuple[int, ...], adapter: str = "") -> KV | None:
        """The query's tensors through `adapter` if cached (now held by request `rid`, and most
        recently used)."""
        key = (adapter, ids)
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        self._hold(rid, key, entry)
        return entry.kv

    def longest_head(self, ids: tuple[int, ...], adapter: str = "") -> tuple[int, KV | None]:
        """(head_len, its tensors) of the longest cached head of `ids` through `adapter` shorter
        than `ids`, or (0, None). The entry it came from counts as used. Scans the entries: each a
        few slice compares, far less than computing the query it may save."""
        best_len, best_key = 0, None
        for key, entry in self._entries.items():
            head_len = usable_head_len(key[1], entry.is_whole, ids) if key[0] == adapter else 0
            if head_len > best_len:
                best_len, best_key = head_len, key
        if best_key is None:
            return 0, None
        self._entries.move_to_end(best_key)
        entry = self._entries[best_key]
        return best_len, head_of(entry.kv, entry.num_tokens, best_len)

    def add(self, rid: int, ids: tuple[int, ...], kv: KV, adapter: str = "") -> None:
        """Keep a freshly computed query through `adapter`, held by request `rid`; then evict down
        to the budget."""
        key = (adapter, ids)
        entry = Entry.of(kv, len(ids))
        self._entries[key] = entry
        self.num_tokens += entry.num_tokens
        self._hold(rid, key, entry)
        self._evict()

    def keep_only(self, live_request_ids: Iterable[int]) -> None:
        """Requests not in `live_request_ids` have left: they no longer hold their queries; then
        evict down to the budget."""
        live = set(live_request_ids)
        for rid in [rid for rid in self._held if rid not in live]:
            entry = self._entries.get(self._held.pop(rid))
            if entry is not None:
                entry.holders.discard(rid)
        self._evict()

    def clear(self) -> None:
        """Forget every entry no live request holds (e.g. the synthetic ones of a warm-up)."""
        for key in [key for key, entry in self._entries.items() if not entry.holders]:
            self._drop(key)

    def _hold(self, rid: int, key: Key, entry: Entry) -> None:
        previous = self._held.get(rid)
        if previous is not None and previous != key and previous in self._entries:
            self._entries[previous].holders.discard(rid)  # a request holds one query
        self._held[rid] = key
        entry.holders.add(rid)

    def _evict(self) -> None:
        """Least recently used idle entries out until the cache is within its budget, or only
        held entries are left (those leave once their requests do)."""
        if self.num_tokens <= self.max_tokens:
            return
        for key in [key for key, entry in self._entries.items() if not entry.holders]:
            self._drop(key)
            if self.num_tokens <= self.max_tokens:
                return

    def _drop(self, key: Key) -> None:
        self.num_tokens -= self._entries.pop(key).num_tokens
