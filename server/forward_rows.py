"""The rows of one shared-prefix items forward: the items, a request's side by side, and each query
the forward computes (query_forward.riding_queries) as a row right after its request's items, so
that the attention takes it into its items' call (cascade_attention: `query_after`).

Rows are right-padded to the longest; an item's positions start after its query, a query's at 0.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence as Seq
from dataclasses import dataclass

import torch

from server.cascade_attention import PrefixSegments
from server.query_cache import KV
from server.sequence import Request, Sequence


@dataclass(frozen=True)
class ForwardRows:
    input_ids: torch.Tensor   # [rows, longest]
    positions: torch.Tensor   # [rows, longest]
    item_rows: list[int]      # the row of each sequence, in the order given
    query_rows: dict[int, tuple[int, int]]  # request id -> (its query's row, the query's length)


def forward_rows(sequences: Seq[Sequence], queries: Seq[Request]) -> ForwardRows:
    """`sequences`: a request's side by side; `queries`: requests whose query rides along."""
    riding = {request.rid: request for request in queries}
    layout: list[Sequence | Request] = []
    for rid, run in itertools.groupby(sequences, key=lambda seq: seq.request.rid):
        layout.extend(run)
        if rid in riding:
            layout.append(riding[rid])
    item_rows = [index for index, row in enumerate(layout) if isinstance(row, Sequence)]
    query_rows = {row.rid: (index, len(row.prefix_ids)) for index, row in enumerate(layout)
                  if isinstance(row, Request)}
    input_ids, positions = padded_rows([(row.own_ids, len(row.request.prefix_ids)) if isinstance(row, Sequence)
                                        else (row.prefix_ids, 0) for row in layout])
    return ForwardRows(input_ids, positions, item_rows, query_rows)


def padded_rows(rows: Seq[tuple[Seq[int], int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, positions) [len(rows), longest] of (ids, first position) pairs: the ids
    right-padded with 0, the positions counting on from the first through the padding."""
    longest = max(len(ids) for ids, _ in rows)
    input_ids = torch.zeros(len(rows), longest, dtype=torch.long)
    positions = torch.zeros(len(rows), longest, dtype=torch.long)
    for index, (ids, start) in enumerate(rows):
        input_ids[index, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        positions[index] = start + torch.arange(longest)
    return input_ids, positions


def prefix_segments(sequences: Seq[Sequence], rows: ForwardRows, prefix_cache: dict[int, KV],
                    num_layers: int) -> PrefixSegments:
    """Each request's run of item rows with a query, and that query's kept keys and values per
    layer, or the row of this forward that computes it."""
    bounds, prefixes, sources = [], [], []
    for rid, run in itertools.groupby(zip(rows.item_rows, sequences), key=lambda pair: pair[1].request.rid):
        run = list(run)
        if run[0][1].request.prefix_ids:
            bounds.append((run[0][0], run[-1][0] + 1))
            sources.append(rows.query_rows.get(rid))
            prefixes.append((None,) * num_layers if rid in rows.query_rows else prefix_cache[rid])
    return PrefixSegments(tuple(bounds), tuple(zip(*prefixes)),
                          tuple(sources) if rows.query_rows else ())
