"""EncoderRunner: an encoder cross-encoder (BERT, RoBERTa, XLM-RoBERTa *ForSequenceClassification)
behind the engine's Runner protocol; run(batch) -> class scores.

Bidirectional attention: every token of a pair sees the document, so the query cannot be computed
once and shared (the decoder runner's trick). Each sequence runs whole (its request's prefix, the
pair's first part, then its own ids), right-padded with the model's pad token in length-grouped
forwards (batch_layout.py), through the family's own model and head (`model(...).logits`: its
pooler or <s> head). Token types as the tokenizer gives a pair (special_tokens.PairTokens): the
prefix takes the first part's type, own ids the second's; a sequence without a prefix (one text,
/classify) is all the first type. Never sees a queue; keeps no query cache.
"""
from __future__ import annotations

from typing import Iterable, Sequence as Seq

import torch

from server.batch_layout import max_forward_tokens, plan_groups
from server.classifier_support import activation_of, encoder_context_tokens
from server.heads import class_scores
from server.sequence import RunResult, Sequence
from server.special_tokens import pair_tokens_of, special_tokens_of

# Every forward pays each layer's per-op costs (and, on a shared CPU, its threads' barriers) again:
# a 20-document rerank of a MiniLM-L12-shaped BERT in bfloat16 took 8 forwards at 5 % padding, and
# ran about 10 % slower (one thread, the best of 4) than in the 2 forwards it takes at 16 %
# (docs/performance.md). So groups are cut only past 25 % padding.
ENCODER_MAX_PADDING_FRACTION = 0.25


class EncoderRunner:
    shares_query_in_forward = False  # each row holds its query: the scheduler counts it per row
    num_cached_prefixes = 0
    is_compiled = False
    can_compile = False  # no items forward to compile: each pair runs whole, eager (compile_start)
    eager_reason = "eager: a cross-encoder has no items forward to compile"
    attention = ("transformers", "a cross-encoder runs its family's own attention")

    def __init__(self, model, tokenizer, device: torch.device | str = "cpu",
                 max_padding_fraction: float = ENCODER_MAX_PADDING_FRACTION) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.special_tokens = special_tokens_of(tokenizer)
        self.pair_tokens = pair_tokens_of(tokenizer)
        self.activation = activation_of(model.config)
        self.max_padding_fraction = max_padding_fraction
        self.max_forward_tokens = max_forward_tokens(self.device.type, self.dtype.itemsize)
        # NOTE: padding with another id than pad_token_id would move RoBERTa's positions (it
        # counts non-pad tokens) past the real tokens' and, at the longest, past the table.
        self._pad_id = model.config.pad_token_id or 0

    @property
    def vocab_size(self) -> int:
        return self.model.get_input_embeddings().num_embeddings

    @property
    def max_context_tokens(self) -> int:
        return encoder_context_tokens(self.model.config)

    @property
    def dtype(self) -> torch.dtype:
        return self.model.dtype

    def tokenize(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def keep_only(self, live_request_ids: Iterable[int]) -> None:
        """Nothing is kept across forwards."""

    @torch.inference_mode()
    def run(self, sequences: Seq[Sequence]) -> RunResult:
        groups = plan_groups([seq.num_tokens for seq in sequences], [0] * len(sequences),
                             self.max_padding_fraction, self.max_forward_tokens)
        scores: list[list[float]] = [[] for _ in sequences]
        for group in groups:
            rows = [sequences[row] for row in group.rows]
            logits = self.model(**self._inputs(rows, group.max_own_tokens)).logits.float()
            for row, row_scores in zip(group.rows, class_scores(logits, rows, self.activation)):
                scores[row] = row_scores
        return RunResult(scores, 0, sum(group.num_computed_tokens for group in groups),
                         sum(group.num_padding_tokens for group in groups))

    def _inputs(self, sequences: Seq[Sequence], length: int) -> dict[str, torch.Tensor]:
        """input_ids, attention_mask (and token_type_ids where the tokenizer sends them), right-padded."""
        input_ids = torch.full((len(sequences), length), self._pad_id, dtype=torch.long)
        attention = torch.zeros(len(sequences), length, dtype=torch.long)
        types = torch.zeros(len(sequences), length, dtype=torch.long)
        first, second = self.pair_tokens.types or (0, 0)
        for row, seq in enumerate(sequences):
            prefix, own = seq.request.prefix_ids, seq.own_ids
            input_ids[row, :seq.num_tokens] = torch.tensor(prefix + own)
            attention[row, :seq.num_tokens] = 1
            types[row, :len(prefix)] = first
            types[row, len(prefix):seq.num_tokens] = second if prefix else first
        inputs = {"input_ids": input_ids, "attention_mask": attention}
        if self.pair_tokens.types is not None:
            inputs["token_type_ids"] = types
        return {name: tensor.to(self.device) for name, tensor in inputs.items()}
