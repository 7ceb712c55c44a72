"""ModelRunner: owns the model, the tokenizer and the query (prefix) cache; run(batch) -> scores.

A batch holds sequences of one or more requests. Each request's shared prefix (its query) comes
from the query cache (query_cache.py: kept across requests, keyed by its exact ids) or is computed,
continuing from its longest cached head where there is one (where the cascade takes them, a new
query as one more row of its items' own forward, or the batch's new queries as rows of one forward:
query_forward.py), and added there (all keys on full-attention layers, the last window - 1 on
sliding ones: all an item can still see); every item of that request then attends to them. The
batch's items go through as few forwards as keep padding small (batch_layout.py groups them by length); in each,
prefixes right-padded in a fresh cache, own tokens right-padded after them, positions given
explicitly, and one mask per layer type (full or sliding) built from true positions
(attention_masks.py). Only each item's last hidden state goes on, to the head (heads.py): lm_head
and what the family's ForCausalLM does after it (soft-capping, logit scaling), or a
*ForSequenceClassification's score layer and its activation. A request may name a LoRA adapter
(lora_rows.py): its rows of every forward, and its query's, go through it. Scores equal
the unshared computation for the families that model_support.py allows; any other model is refused
here. Never sees a queue; never decodes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence as Seq

import torch

from server.attention_masks import additive_mask, num_kept
from server.batch_cache import batch_cache
from server.batch_layout import MAX_PADDING_FRACTION, max_forward_tokens, plan_groups
from server.cascade_attention import cascade_reason, own_keys_recorded, register
from server.compiled_forward import CASCADE, FREEZE_WEIGHTS, MASKED, ItemsForward, compile_settings
from server.forward_rows import forward_rows, prefix_segments
from server.heads import head_of
from server.lora import Adapter
from server.lora_rows import AdapterSet
from server.model_support import layer_mask_keys, layer_windows, unsupported_reason
from server.query_cache import KV, QueryCache
from server.query_forward import QueryRow, compute_queries, plan_round, riding_queries
from server.sequence import Request, RunResult, ScoringOptions, Sequence, requests_of
from server.special_tokens import special_tokens_of


class ModelRunner:
    def __init__(self, model, tokenizer, device: torch.device | str = "cpu",
                 max_padding_fraction: float = MAX_PADDING_FRACTION,
                 query_cache_tokens: int = 0, adapters: Seq[Adapter] = ()) -> None:
        """query_cache_tokens: the query cache's budget (QueryCache); 0 keeps a query only while
        a request holds it. adapters: LoRA adapters loaded for `model` (lora.load_adapter)."""
        reason = unsupported_reason(model.config)
        if reason is not None:
            raise ValueError(f"the runner cannot score this model exactly: {reason}")
        self.model = model
        self.tokenizer = tokenizer
        self.special_tokens = special_tokens_of(tokenizer)  # what it adds around a text (a BOS)
        self.device = torch.device(device)
        self._decoder = model.get_decoder()
        register()  # the shared-prefix attention, for the forwards it computes exactly
        self._items_forward = ItemsForward(self._decoder)
        self.adapters = AdapterSet(model, adapters)
        self.head = head_of(model)  # lm_head and label probabilities, or a classification head
        self._windows = layer_windows(model.config)  # mask key -> window
        self._layer_windows = [self._windows[key] for key in layer_mask_keys(model.config)]
        self.query_cache = QueryCache(query_cache_tokens)
        self._prefix_cache: dict[int, KV] = {}  # the batch being run's queries, by request id
        self.max_padding_fraction = max_padding_fraction  # 1.0: the whole batch in one forward
        self.use_cascade = True  # False: every forward takes the masked layout (benchmarks compare)
        # Item tokens a forward computes at most (batch_layout): on CPU bigger is slower per item.
        self.max_forward_tokens = max_forward_tokens(self.device.type, self.dtype.itemsize)

    @property
    def vocab_size(self) -> int:
        return self.head.vocab_size

    @property
    def max_context_tokens(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048))

    @property
    def dtype(self) -> torch.dtype:
        return self.model.dtype

    def tokenize(self, text: str) -> list[int]:
        """Token ids without special tokens: query and items are joined as ids, then
        special_tokens put around them once (see inputs.py)."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @property
    def num_cached_prefixes(self) -> int:
        """Queries in the query cache, held or idle."""
        return len(self.query_cache)

    def keep_only(self, live_request_ids: Iterable[int]) -> None:
        """Requests that left the scheduler no longer hold their queries (the cache keeps them
        within its budget). Never call during run()."""
        self.query_cache.keep_only(live_request_ids)

    @property
    def can_compile(self) -> bool:
        """Its items forward compiles (compile_start.py), unless adapters' hooks are in it."""
        return not self.adapters

    eager_reason = "eager: LoRA adapters are applied by hooks a compiled graph cannot take"

    @property
    def is_compiled(self) -> bool:
        return self._items_forward.is_compiled

    def compile_settings(self, freeze: bool | None = None) -> dict[str, object]:
        """What compile() would build, for the compile cache's key."""
        return compile_settings(CASCADE if self.shares_query_in_forward else MASKED,
                                FREEZE_WEIGHTS if freeze is None else freeze, self._decoder)

    def compile(self, freeze: bool | None = None) -> float:
        """Compile the items forward (compiled_forward.py) in the layout every forward takes
        (the shared-prefix one where shares_query_in_forward, else the masked one), its weights
        frozen where `freeze` (None: FREEZE_WEIGHTS, off), and warm it on synthetic batches;
        call before serving. Returns the seconds it took."""
        freeze = FREEZE_WEIGHTS if freeze is None else freeze
        cascade = self.shares_query_in_forward
        previous, self.use_cascade = self.use_cascade, cascade  # the warm-up takes that layout
        try:
            return self._items_forward.compile(self._warm_up, CASCADE if cascade else MASKED, freeze)
        finally:
            self.use_cascade = previous

    @property
    def attention(self) -> tuple[str, str]:
        """(the joined attention's backend, why): "scoringfleet" (ours) or "torch"."""
        return self._items_forward.attention

    def use_attention_kernel(self, folder: Path | None = None) -> None:
        """Eager forwards take our joined attention where it runs, its library built in `folder`
        (ItemsForward.use_joined_attention; compile() does this itself)."""
        self._items_forward.use_joined_attention(folder)

    def _warm_up(self, rows: int, own_tokens: int, prefix_tokens: int, num_queries: int = 1) -> None:
        """A synthetic forward: `rows` items of `own_tokens` under `num_queries` distinct queries
        (the first of `prefix_tokens`, each next one a token shorter; the first query takes the
        rows the others' one each leaves)."""
        options = ScoringOptions((0,), False)
        requests = []
        for k in range(num_queries):
            ids = tuple((i + k) % self.vocab_size for i in range(prefix_tokens - k + own_tokens))
            num_rows = rows - (num_queries - 1) if k == 0 else 1
            requests.append(Request.create(ids[:prefix_tokens - k], [ids[prefix_tokens - k:]] * num_rows,
                                           options))
        self.run([seq for request in requests for seq in request.sequences])
        self.keep_only(())
        self.query_cache.clear()  # synthetic queries: no client sends them

    @torch.inference_mode()
    def run(self, sequences: Seq[Sequence]) -> RunResult:
        requests = requests_of(sequences)
        groups = plan_groups([len(seq.own_ids) for seq in sequences],
                             [len(seq.request.prefix_ids) for seq in sequences],
                             self.max_padding_fraction, self.max_forward_tokens)
        riding = self._riding_queries(requests, sequences, groups)  # rid -> the group computing it
        num_computed = self._fetch_prefixes([request for request in requests if request.rid not in riding])
        riders = [request for request in requests if request.rid in riding]
        num_computed += sum(len(request.prefix_ids) for request in riders)
        scores: list[list[float]] = [[] for _ in sequences]
        for index, group in enumerate(groups):
            rows = [sequences[row] for row in group.rows]
            queries = [request for request in riders if riding[request.rid] == index]
            for row, row_scores in zip(group.rows, self.head.scores(self._last_token_states(rows, queries), rows)):
                scores[row] = row_scores
        query_padding = sum(groups[riding[r.rid]].max_own_tokens - len(r.prefix_ids) for r in riders)
        return RunResult(scores, sum(len(seq.request.prefix_ids) for seq in sequences) - num_computed,
                         num_computed + sum(group.num_computed_tokens for group in groups) + query_padding,
                         sum(group.num_padding_tokens for group in groups) + query_padding)

    def _riding_queries(self, requests: Seq[Request], sequences: Seq[Sequence], groups) -> dict[int, int]:
        """The queries computed as rows of their items' forward (query_forward.riding_queries),
        where the shared-prefix attention takes the whole batch and no adapter's hooks are in it."""
        longest = max(len(seq.request.prefix_ids) + len(seq.own_ids) for seq in sequences)
        if self.adapters or not self._takes_cascade(longest):
            return {}
        return riding_queries(requests, groups, [seq.request.rid for seq in sequences], self.query_cache)

    def _fetch_prefixes(self, requests: Seq[Request]) -> int:
        """Fill _prefix_cache with each request's query, from the query cache or computed (from
        its longest cached head) and added there, in rounds (query_forward.plan_round): so that
        requests of a batch with the same query or head compute it once. Returns the query
        tokens computed."""
        self._prefix_cache = {}
        num_computed = 0
        waiting = [request for request in requests if request.prefix_ids]  # item_first: nothing shared
        while waiting:
            cached, now, waiting = plan_round(waiting, self.query_cache)
            self._prefix_cache.update(cached)
            for (request, row), kv in zip(now, self._compute_queries([row for _, row in now])):
                self.query_cache.add(request.rid, row.ids, kv, row.adapter or "")
                self._prefix_cache[request.rid] = kv
                num_computed += len(row.ids) - row.head_len
        return num_computed

    def _compute_queries(self, rows: Seq[QueryRow]) -> list[KV]:
        """Queries as rows of the items forward where the cascade computes them all exactly,
        else (or one alone) each in a forward of its own."""
        if len(rows) > 1 and self._takes_cascade(max(len(row.ids) for row in rows)):
            caches = compute_queries(self._items_forward.cascade, rows, self.adapters.rows, self.device,
                                     self.max_padding_fraction, self.max_forward_tokens)
            return [self._kept(kv, len(row.ids)) for row, kv in zip(rows, caches)]
        caches = []
        for row in rows:
            with self.adapters.rows([row.adapter]):
                caches.append(self._compute_prefix(row.ids, row.head_len, row.head))
        return caches

    def _compute_prefix(self, prefix_ids: tuple[int, ...], head_len: int = 0,
                        head: KV | None = None) -> KV:
        """The query's kept keys and values, computed whole or, given the kept tensors of its
        first head_len tokens, only the rest: a forward over the rest at its true positions,
        over a cache of the head, with the runner's masks (the head's sliding layers hold only
        the last window - 1 keys, which is all the rest can see). Exact either way."""
        from transformers import DynamicCache

        input_ids = torch.tensor([prefix_ids[head_len:]], device=self.device)
        if head is None:
            # NOTE: a cache built without the config keeps every key, as the batch layout
            # expects; then each sliding layer keeps what items can still see (num_kept), as a
            # copy so that the full tensor is freed.
            out = self._decoder(input_ids=input_ids, cache=DynamicCache(), use_cache=True)
        else:
            num_rest = len(prefix_ids) - head_len
            masks = {kind: additive_mask([head_len], [num_rest], num_rest, window, self.dtype,
                                         self.device) for kind, window in self._windows.items()}
            positions = torch.arange(head_len, len(prefix_ids), device=self.device).unsqueeze(0)
            out = self._decoder(input_ids=input_ids, attention_mask=masks.get("", masks),
                                position_ids=positions, cache=DynamicCache(ddp_cache_data=head),
                                use_cache=True)
        return self._kept(tuple((layer.keys, layer.values) for layer in out.cache.layers), len(prefix_ids))

    def _kept(self, kv: KV, num_tokens: int) -> KV:
        """A query's keys and values as the cache keeps them: each sliding layer's last
        num_kept, as a copy so that the full tensor is freed."""
        kept = []
        for (keys, values), window in zip(kv, self._layer_windows):
            start = keys.shape[2] - num_kept(num_tokens, window)
            kept.append((keys[:, :, start:].clone(), values[:, :, start:].clone()) if start else (keys, values))
        return tuple(kept)

    @property
    def shares_query_in_forward(self) -> bool:
        """Every forward takes the shared-prefix attention, whatever its sequences' lengths: a
        request's query is held once in it (the scheduler's prefill budget then counts it once)."""
        return self._takes_cascade(self.max_context_tokens)

    def _takes_cascade(self, max_tokens: int) -> bool:
        """Whether a forward of sequences of at most `max_tokens` (prefix included) takes the
        shared-prefix attention: exact there (cascade_reason), and not switched off."""
        return self.use_cascade and cascade_reason(
            self._decoder.config, self.device, self._layer_windows, max_tokens) is None

    def _last_token_states(self, sequences: Seq[Sequence], queries: Seq[Request] = ()) -> torch.Tensor:
        """The last hidden state [batch, hidden] at each sequence's last token, in one forward pass:
        the shared-prefix attention where it is exact (cascade_reason), else the masked layout.
        `queries`: requests whose query that forward computes too, as rows after the items'."""
        max_tokens = max(len(seq.request.prefix_ids) + len(seq.own_ids) for seq in sequences)
        cascade = self._takes_cascade(max_tokens)
        if not (cascade or self.adapters):
            return self._last_hidden(sequences, cascade=False)
        # The rows of a request side by side (each request's prefix is then one run of rows), and
        # of an adapter (its update then one slice of the rows: lora_rows.py).
        order = sorted(range(len(sequences)),
                       key=lambda row: (sequences[row].request.adapter or "", sequences[row].request.rid))
        hidden = self._last_hidden([sequences[row] for row in order], cascade=cascade, queries=queries)
        return hidden[torch.tensor(order, device=self.device).argsort()]

    def _last_hidden(self, sequences: Seq[Sequence], cascade: bool, queries: Seq[Request] = ()) -> torch.Tensor:
        """The decoder's last hidden state [batch, hidden] at each sequence's last token; each of
        `queries` (cascade only, none longer than the longest item) a row after its request's
        (forward_rows.py), its keys and values their prefix, then kept (_keep_queries)."""
        prefix_lens = [len(seq.request.prefix_ids) for seq in sequences]
        own_lens = [len(seq.own_ids) for seq in sequences]
        rows = forward_rows(sequences, queries)
        input_ids, positions = rows.input_ids.to(self.device), rows.positions.to(self.device)
        with self.adapters.rows([seq.request.adapter for seq in sequences]):  # each row its adapter's
            if cascade:
                segments = prefix_segments(sequences, rows, self._prefix_cache, len(self._layer_windows))
                with own_keys_recorded(list(rows.query_rows.values())) as kept:
                    hidden = self._items_forward.cascade(input_ids, positions, segments)
                self._keep_queries(queries, kept)
            else:
                masks = {kind: additive_mask(prefix_lens, own_lens, max(own_lens), window, self.dtype, self.device)
                         for kind, window in self._windows.items()}
                layers = batch_cache(sequences, self._prefix_cache, self.device) if max(prefix_lens) else None
                hidden = self._items_forward(input_ids, masks[""] if "" in masks else masks, positions, layers)
        last = torch.tensor(own_lens, device=self.device) - 1
        return hidden[torch.tensor(rows.item_rows, device=self.device), last]

    def _keep_queries(self, queries: Seq[Request], kept) -> None:
        """The queries a forward computed as rows: into the query cache and this batch's."""
        for index, request in enumerate(queries):
            kv = self._kept(tuple(kept[layer][index] for layer in sorted(kept)), len(request.prefix_ids))
            self.query_cache.add(request.rid, request.prefix_ids, kv, request.adapter or "")
            self._prefix_cache[request.rid] = kv

