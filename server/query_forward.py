"""A batch's new queries in as few forwards as its items: rows of the items forward, not one
eager forward each.

A query's cache is what the decoder's attention layers see of it: each layer's keys and values
after the projections (and rotary). Run as rows of the shared-prefix items forward (compiled
where the runner compiled it), each query's uncached part is a row, its cached head (query_cache's
longest_head) that row's prefix, and every layer's cascade attention records the rows' own keys
and values (cascade_attention.own_keys_recorded): the head's then the row's are the query's cache.
One forward of four 120-token queries replaces four eager forwards of one row each (bf16 on AMX:
77 ms a query eager, a fifth of a request's time). Only where the cascade computes the query
exactly (no window cutting it: every key is kept), as for items.

A query asked once in its batch, no longer than its items, goes further: it rides as one more row
of its items' own forward (`riding_queries`; forward_rows.py), which takes its keys as their prefix.

Which queries go in one forward: the distinct ones (a query asked twice in a batch is computed
once, and the second request finds it in the query cache), and of queries that share a head, only
the first, where waiting for it would spare another at least half its work (`waits_for_head`):
the others come in the next round, continuing from it.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence as Seq
from dataclasses import dataclass

import torch

from server.batch_layout import Group, plan_groups
from server.cascade_attention import PrefixSegments, own_keys_recorded
from server.forward_rows import padded_rows
from server.query_cache import KV, QueryCache, common_prefix_len
from server.sequence import Request


@dataclass(frozen=True)
class QueryRow:
    """One query to compute: its ids, the cached head it continues (head_len tokens, None if
    none) and its LoRA adapter (None: the base model)."""

    ids: tuple[int, ...]
    head_len: int
    head: KV | None
    adapter: str | None


def waits_for_head(ids: tuple[int, ...], head_len: int, others: Seq[tuple[int, ...]]) -> bool:
    """True if a query already in this round shares a head with `ids` that would spare it at
    least half of what it has to compute now (head_len of it is cached)."""
    to_compute = len(ids) - head_len
    shared = max((common_prefix_len(ids, other) for other in others), default=0)
    return shared > head_len and 2 * (shared - head_len) >= to_compute


def compute_queries(forward: Callable[..., torch.Tensor], rows: Seq[QueryRow], adapter_rows,
                    device: torch.device, max_padding_fraction: float,
                    max_forward_tokens: int | None) -> list[KV]:
    """Each row's query cache (per layer (keys, values) [1, kv heads, len(ids), dim]), computed
    in length groups (batch_layout) through `forward(input_ids, positions, segments)`: the items
    forward's cascade layout. `adapter_rows`: lora_rows.AdapterSet.rows."""
    own_lens = [len(row.ids) - row.head_len for row in rows]
    caches: list[KV | None] = [None] * len(rows)
    for group in plan_groups(own_lens, [row.head_len for row in rows], max_padding_fraction, max_forward_tokens):
        order = sorted(group.rows, key=lambda index: rows[index].adapter or "")  # one slice per adapter
        for index, cache in zip(order, _group_caches(forward, [rows[i] for i in order], adapter_rows, device)):
            caches[index] = cache
    return caches


def _group_caches(forward, rows: Seq[QueryRow], adapter_rows, device: torch.device) -> list[KV]:
    own = [row.ids[row.head_len:] for row in rows]
    input_ids, positions = padded_rows([(ids, row.head_len) for row, ids in zip(rows, own)])
    with own_keys_recorded([(index, len(ids)) for index, ids in enumerate(own)]) as kept, \
            adapter_rows([row.adapter for row in rows]):
        forward(input_ids.to(device), positions.to(device), _heads_as_prefixes(rows))
    layers = [kept[layer] for layer in sorted(kept)]
    return [tuple(_after_head(row.head, layer, *own_kv[index]) for layer, own_kv in enumerate(layers))
            for index, row in enumerate(rows)]


def _heads_as_prefixes(rows: Seq[QueryRow]) -> PrefixSegments:
    """Each row with a cached head is a segment of its own, that head its prefix."""
    with_head = [index for index, row in enumerate(rows) if row.head is not None]
    heads = [rows[index].head for index in with_head]
    return PrefixSegments(tuple((index, index + 1) for index in with_head), tuple(zip(*heads)))


def _after_head(head: KV | None, layer: int, keys: torch.Tensor, values: torch.Tensor):
    """A layer's (keys, values) of a whole query: its cached head's, then its computed rest."""
    if head is None:
        return keys, values
    return torch.cat([head[layer][0], keys], 2), torch.cat([head[layer][1], values], 2)


def plan_round(waiting: Seq[Request], query_cache: QueryCache,
               ) -> tuple[dict[int, KV], list[tuple[Request, QueryRow]], list[Request]]:
    """(the queries the cache holds, by request id; the requests whose queries this round
    computes, with what each continues; the requests that wait for the next round: theirs is
    one being computed, or it waits_for_head)."""
    cached: dict[int, KV] = {}
    now: list[tuple[Request, QueryRow]] = []
    later: list[Request] = []
    for request in waiting:
        ids, adapter = request.prefix_ids, request.adapter or ""
        kv = query_cache.get(request.rid, ids, adapter)
        if kv is not None:
            cached[request.rid] = kv
            continue
        head_len, head = query_cache.longest_head(ids, adapter)
        computing = [row.ids for _, row in now if (row.adapter or "") == adapter]
        if ids in computing or waits_for_head(ids, head_len, computing):
            later.append(request)
        else:
            now.append((request, QueryRow(ids, head_len, head, request.adapter)))
    return cached, now, later


def riding_queries(requests: Seq[Request], groups: Seq[Group], row_rids: Seq[int],
                   query_cache: QueryCache) -> dict[int, int]:
    """Request id -> the group whose items forward computes that request's query as one more row
    (PrefixSegments.query_rows): a query not cached, nor more than half of it as a head, asked by
    no other request of the batch, and no longer than the rows of its request's first group (so
    it widens no forward).
    A query computed apart is a forward of a few hundred tokens, where the matmuls run at half
    their speed or less (bf16 on AMX, 120 tokens: 75 ms eager; requests of 10 x 180-token items,
    one a batch, compiled: 20.3 items/s riding against 19.4 apart)."""
    first_group: dict[int, int] = {}
    for index, group in enumerate(groups):
        for row in group.rows:
            first_group.setdefault(row_rids[row], index)
    asked = Counter((request.adapter or "", request.prefix_ids) for request in requests)
    riding = {}
    for request in requests:
        ids, adapter = request.prefix_ids, request.adapter or ""
        # A cached head shorter than half the query (a BOS, a short template) is not worth a
        # forward of the rest apart: the row computes the whole query.
        if not ids or asked[adapter, ids] > 1 or query_cache.has(ids, adapter) \
                or 2 * query_cache.longest_head(ids, adapter)[0] > len(ids):
            continue
        if len(ids) <= groups[first_group[request.rid]].max_own_tokens:
            riding[request.rid] = first_group[request.rid]
    return riding
