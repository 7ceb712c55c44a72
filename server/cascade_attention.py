"""Shared-prefix (cascade) attention for the items forward: no masked block is ever computed.

The masked layout (attention_masks.py) puts each row's prefix keys and its own keys in one padded
key range and hides, with an additive mask, what a query must not see: every query x key block is
computed, and the prefix is copied into every row. Here each layer's attention is two dense calls
merged by their log-sum-exp (FlashInfer's cascade attention):
  (a) every row's queries against its request's prefix keys, all of them, no mask: the rows of one
      request are folded into one long query run against the single [1, kv heads, n, dim] prefix
      (no per-row copy of it, one large matmul instead of many small ones);
  (b) every row's queries against its own keys with `is_causal` (right padding sits after every
      real query, so no real query sees it).
softmax over (a) and (b) together = their outputs weighted by exp(lse_part - lse_all), exactly.
On CPU a request whose prefix is shorter than its rows takes one call instead (`joins_prefix`):
the prefix copied in front of each row's keys, under a mask that is causal on the own part. torch's
CPU flash kernel cuts a short query run into 32-query blocks, where two calls plus the merge cost
about twice one call over the joined keys (bf16 on AMX: 3.7 ms against 7.0 for 10 rows of 180
tokens over a 120-token prefix); a long prefix is what the split saves (1000 over 20: 5.0 against
9.6), so there the cascade stays. A long run of queries is two such calls (`query_halves`): the
first half's queries see none of the second half's own keys, so its call leaves them out.
It holds only where no window cuts a key a query could otherwise see, where the attention is what
SDPA computes (no soft-capping, no sinks), and on CPU and CUDA, whose kernels return the
log-sum-exp (CPU: torch's flash kernel; CUDA: the memory-efficient one, which takes every dtype)
(`cascade_reason()` says why not; the runner then takes the masked path).

Each layer's attention is one opaque custom op (`scoringfleet::cascade_attention`) that reads the
forward's PrefixSegments from a per-thread slot (`prefix_segments()`), as vLLM's attention op reads
its forward context, and its layer's index as a tensor (one compiled graph serves every layer:
layer_compile.py): torch.compile traces around it, never into it, and guards on no segment.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Sequence as Seq

import torch

from server.layer_compile import layer_index

NAME = "scoring_cascade"  # the attention implementation's name in transformers' registry
LSE_DEVICES = ("cpu", "cuda")  # where _attend has a kernel that returns the log-sum-exp
SINK_FAMILIES = {"gpt_oss"}  # attention sinks: an extra logit per head, not SDPA's softmax
JOIN_MIN_HALF = 64  # queries: the joined attention splits a run only into halves at least this long


@dataclass(frozen=True)
class PrefixSegments:
    """Which rows attend to which prefix: rows[start:end] share segment s's prefix, the (keys,
    values) [1, kv heads, n, dim] of their request's query: `layers[layer][s]`, kept from an
    earlier forward, or, where `query_rows[s]` is (row, n), the first n own keys and values of
    that row of this same forward (the query computed with its items: a layer's keys of the query
    row are complete before its attention, and the query row sees only itself). Rows in no
    segment have no prefix."""

    bounds: tuple[tuple[int, int], ...]
    layers: tuple[tuple[tuple[torch.Tensor, torch.Tensor] | None, ...], ...]  # [layer][segment]; () with no segment
    query_rows: tuple[tuple[int, int] | None, ...] = ()  # [segment]; () where none is


def cascade_reason(config, device: torch.device, windows: Seq[int | None], max_tokens: int) -> str | None:
    """None if the cascade computes this forward exactly (sequences of at most `max_tokens`
    tokens, prefix included); else why the masked path must run it."""
    if device.type not in LSE_DEVICES:
        return f"no log-sum-exp attention kernel wired for {device.type}"
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return f"attention implementation {config._attn_implementation!r} is not sdpa"
    if getattr(config, "attn_logit_softcapping", None) is not None:
        return "attention logits are soft-capped"
    if config.model_type in SINK_FAMILIES:
        return "attention sinks"
    # A query sees a key q - k < window positions back: with every distance below the window,
    # the window cuts nothing (and the prefix keeps all its keys: num_kept).
    if any(window is not None and max_tokens > window for window in windows):
        return "a sliding window cuts this batch's sequences"
    return None


def register() -> None:
    """Put the cascade into transformers' attention registry (idempotent). No mask function is
    registered under NAME, so the decoder builds no mask for it: the cascade needs none."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, cascade_attention)


_forward = threading.local()  # .segments: the PrefixSegments of the forward this thread runs


@contextlib.contextmanager
def prefix_segments(segments: PrefixSegments, joined_kernel: Callable | None = None) -> Iterator[None]:
    """The prefixes every cascade attention layer reads during one items forward on this thread,
    and the kernel its joined calls take in bfloat16 on CPU (attention_kernel.py; None: torch's)."""
    _forward.segments, _forward.joined_kernel = segments, joined_kernel
    try:
        yield
    finally:
        _forward.segments = _forward.joined_kernel = None


def cascade_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' attention signature: query [rows, heads, L, dim], key/value the rows' own
    [rows, kv heads, L, dim]; returns ([rows, L, heads, dim], None) as sdpa_attention_forward."""
    if kwargs.get("s_aux") is not None or kwargs.get("softcap") is not None:
        raise ValueError("the cascade attention computes plain softmax attention only (cascade_reason)")
    return torch.ops.scoringfleet.cascade_attention(query, key, value, layer_index(module), scaling), None


@torch.library.custom_op("scoringfleet::cascade_attention", mutates_args=())
def _cascade_op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, layer_tensor: torch.Tensor,
                scale: float | None) -> torch.Tensor:
    layer, segments = int(layer_tensor), getattr(_forward, "segments", None)
    if segments is None:
        raise ValueError("the cascade attention runs only inside prefix_segments(): the runner's items forward")
    recording = getattr(_forward, "recording", None)
    if recording is not None:
        kept, rows = recording
        kept[layer] = tuple((_copy(key[row:row + 1, :, :n]), _copy(value[row:row + 1, :, :n])) for row, n in rows)
    sources = segments.query_rows or (None,) * len(segments.bounds)
    prefixes = tuple(kept_prefix if source is None else
                     (key[source[0]:source[0] + 1, :, :source[1]], value[source[0]:source[0] + 1, :, :source[1]])
                     for kept_prefix, source in zip(segments.layers[layer] if segments.bounds else (), sources))
    query_after = [source is not None and source[0] == end for (_, end), source in zip(segments.bounds, sources)]
    return _attend_with_prefix(query, key, value, segments.bounds, prefixes, scale, query_after,
                               getattr(_forward, "joined_kernel", None))


def _copy(tensor: torch.Tensor) -> torch.Tensor:
    """A fresh contiguous tensor: a compiled graph reuses its buffers; a kept view holds the batch's."""
    return tensor.clone(memory_format=torch.contiguous_format)


@contextlib.contextmanager
def own_keys_recorded(rows: Seq[tuple[int, int]]) -> Iterator[dict[int, tuple[tuple[torch.Tensor, torch.Tensor], ...]]]:
    """Every cascade layer of the forward run in this block on this thread keeps, for each
    (row, n) of `rows`, that row's first n own (keys, values) [1, kv heads, n, dim] (copies), in
    the yielded dict by layer: those rows' queries' caches, for the items of later forwards."""
    kept: dict[int, tuple[tuple[torch.Tensor, torch.Tensor], ...]] = {}
    _forward.recording = (kept, tuple(rows))
    try:
        yield kept
    finally:
        _forward.recording = None


@_cascade_op.register_fake
def _(query, key, value, layer_tensor, scale):
    rows, heads, length, dim = query.shape
    return query.new_empty(rows, length, heads, dim)


def _attend_with_prefix(query, key, value, bounds, prefixes, scale, query_after, kernel=None) -> torch.Tensor:
    """[rows, L, heads, dim]: each row's queries over its own keys (causal) and its segment's prefix.
    query_after[segment]: the row right after the segment's is the query row its prefix comes
    from; a joined segment takes it into its call (masked off the prefix: it sees only itself),
    through `kernel` where it applies (_attend_joined)."""
    rows, heads, length, dim = query.shape
    joined = [joins_prefix(keys.shape[2], length, query.device) for keys, _ in prefixes]
    with_query = [join and after for join, after in zip(joined, query_after)]
    bounds = [(start, end + 1) if takes else (start, end) for (start, end), takes in zip(bounds, with_query)]
    if bounds == [(0, rows)] and joined[0]:  # one request's rows: no copy into a shared output
        return _attend_joined(query, key, value, *prefixes[0], scale, with_query[0], kernel=kernel)
    own_runs = runs_outside(rows, [segment for segment, join in zip(bounds, joined) if join])
    if own_runs == [(0, rows)]:
        out, lse = _attend(query, key, value, True, scale)
    else:
        out = query.new_empty(rows, length, heads, dim).transpose(1, 2)  # as the kernel lays it out
        lse = query.new_empty(rows, heads, length, dtype=torch.float32)
        for start, end in own_runs:  # the rows that need their own keys alone, causal
            out[start:end], lse[start:end] = _attend(query[start:end], key[start:end], value[start:end], True, scale)
    for (start, end), (keys, values), join, takes in zip(bounds, prefixes, joined, with_query):
        if join:
            _attend_joined(query[start:end], key[start:end], value[start:end], keys, values, scale, takes,
                           out=out[start:end].transpose(1, 2), kernel=kernel)
            continue
        prefix_out, prefix_lse = _attend(_flatten(query[start:end]), keys, values, False, scale)
        out[start:end] = merge(_unflatten(prefix_out, end - start),
                               _unflatten(prefix_lse.unsqueeze(-1), end - start),
                               out[start:end], lse[start:end].unsqueeze(-1))
    return out.transpose(1, 2).contiguous()


def runs_outside(rows: int, segments: Seq[tuple[int, int]]) -> list[tuple[int, int]]:
    """The maximal runs [start, end) of rows 0..rows-1 that no segment covers."""
    runs, start = [], 0
    for segment_start, segment_end in sorted(segments):
        if segment_start > start:
            runs.append((start, segment_start))
        start = max(start, segment_end)
    return runs + [(start, rows)] if start < rows else runs


def joins_prefix(prefix_length: int, own_length: int, device: torch.device) -> bool:
    """True where one call over prefix and own keys beats the two-part cascade (module docstring)."""
    return device.type == "cpu" and prefix_length < own_length


def _attend_joined(query, key, value, prefix_keys, prefix_values, scale, last_is_query=False,
                   out: torch.Tensor | None = None, kernel: Callable | None = None) -> torch.Tensor:
    """[rows, L, heads, dim] (written into `out` where given): the rows' queries over their prefix
    then their own keys; where `last_is_query`, the last row (the prefix's own query row) over its
    own keys only. Through `kernel` (attention_kernel.py) in bfloat16 on CPU, else torch's flash
    kernel in one call for each half of the queries (`query_halves`)."""
    rows, heads, length, dim = query.shape
    if kernel is not None and _kernel_takes(query, key, value, prefix_keys, prefix_values):
        result = kernel(query, key, value, prefix_keys, prefix_values, dim ** -0.5 if scale is None else scale,
                        last_is_query)
        return result if out is None else out.copy_(result)
    prefix = prefix_keys.shape[2]
    keys = torch.cat([prefix_keys.expand(rows, -1, -1, -1), key], 2)
    values = torch.cat([prefix_values.expand(rows, -1, -1, -1), value], 2)
    if last_is_query:
        mask = _items_then_their_query(rows, length, prefix, query.dtype)
    else:
        mask = _prefix_then_causal(length, prefix, query.dtype)
    out = query.new_empty(rows, length, heads, dim) if out is None else out
    for start, end in query_halves(length):
        seen = prefix + end  # no query of this half sees a key beyond its last one's
        out[:, start:end] = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query[:, :, start:end], keys[:, :, :seen], values[:, :, :seen], 0.0, False,
            attn_mask=mask[..., start:end, :seen], scale=scale)[0].transpose(1, 2)
    return out


def _kernel_takes(*tensors: torch.Tensor) -> bool:
    """What our joined attention computes (kernels/joined_attention.cpp): bfloat16 on CPU, an even
    head dim, each token's head dim contiguous."""
    return all(t.dtype == torch.bfloat16 and t.device.type == "cpu" and t.shape[-1] % 2 == 0 and t.stride(-1) == 1
               for t in tensors)


def query_halves(length: int) -> list[tuple[int, int]]:
    """The runs of queries the joined attention computes in one call each: two halves, so that
    the first skips the second's own keys, all of which the causal mask hides from it (a sixth
    fewer scores at 180 tokens over a 120-token prefix: 3.95 ms against 4.2 for 11 rows, bf16
    on AMX), where a run stays long enough for the kernel's 32-query blocks; else one run. The
    kernel's time goes in the scores it computes, masked or not: each is an exp."""
    if length < 2 * JOIN_MIN_HALF:
        return [(0, length)]
    return [(0, length // 2), (length // 2, length)]


@functools.lru_cache(maxsize=256)
def _prefix_then_causal(own: int, prefix: int, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask [own, prefix + own] (the CPU kernel takes the query's dtype): every query
    sees the whole prefix and its own keys up to itself."""
    position = torch.arange(own)
    sees = torch.cat([torch.ones(own, prefix, dtype=torch.bool), position[None, :] <= position[:, None]], 1)
    return torch.zeros(sees.shape, dtype=dtype).masked_fill_(~sees, float("-inf"))


@functools.lru_cache(maxsize=64)
def _items_then_their_query(rows: int, own: int, prefix: int, dtype: torch.dtype) -> torch.Tensor:
    """[rows, 1, own, prefix + own]: the first rows - 1 as _prefix_then_causal; the last, the query
    row the prefix is the first keys of, sees none of the prefix: only its own keys, causally."""
    items = _prefix_then_causal(own, prefix, dtype)
    query_row = items.clone()
    query_row[:, :prefix] = float("-inf")
    return torch.cat([items.expand(rows - 1, -1, -1), query_row[None]]).unsqueeze(1)


def merge(out_a, lse_a, out_b, lse_b) -> torch.Tensor:
    """Attention over keys A and B together from each part's output [.., L, dim] and float32
    log-sum-exp [.., L, 1]: A's share of the softmax is exp(lse_a) / (exp(lse_a) + exp(lse_b)) =
    sigmoid(lse_a - lse_b), B's the rest. Computed in float32, rounded once."""
    share_a = torch.sigmoid(lse_a - lse_b)
    if out_a.dtype == torch.float32:
        return torch.lerp(out_b, out_a, share_a)
    return torch.lerp(out_b.float(), out_a.float(), share_a).to(out_a.dtype)


def _attend(query, key, value, is_causal: bool, scale) -> tuple[torch.Tensor, torch.Tensor]:
    """(output [B, heads, L, dim] laid out as the query, log-sum-exp [B, heads, L] float32);
    grouped-query heads are read in place on CPU (the kernel maps query head h to kv head
    h // group) and repeated on CUDA (the memory-efficient kernel wants as many as the query)."""
    if query.device.type == "cpu":
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, 0.0, is_causal, scale=scale)
    group = query.shape[1] // key.shape[1]
    if group > 1:
        key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
    out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, None, True, 0.0, is_causal, scale=scale)[:2]
    return out, lse[..., :query.shape[2]]  # NOTE: the kernel pads the log-sum-exp to 32 queries


def _flatten(query: torch.Tensor) -> torch.Tensor:
    """[rows, heads, L, dim] -> [1, heads, rows * L, dim]: every row's queries in one run against
    the one prefix. No copy where the query is laid out [rows, L, heads, dim], as a projection
    viewed into heads is."""
    rows, heads, length, dim = query.shape
    return query.transpose(1, 2).reshape(1, rows * length, heads, dim).transpose(1, 2)


def _unflatten(flat: torch.Tensor, rows: int) -> torch.Tensor:
    """The inverse of _flatten: [1, heads, rows * L, dim] -> [rows, heads, L, dim]."""
    _, heads, num_queries, dim = flat.shape
    return flat.transpose(1, 2).reshape(rows, num_queries // rows, heads, dim).transpose(1, 2)
