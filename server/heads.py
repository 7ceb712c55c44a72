"""What a forward's last-token hidden states become: the runner's head, a small strategy.

LmHead: a causal LM's lm_head and what its ForCausalLM does after it (model_support.final_logits),
then the requested label tokens' probabilities (/v1/score). ClassifierHead: a decoder
*ForSequenceClassification's `score` layer at the last token, then its classes after the
checkpoint's activation (classifier_support.activation_of). The runner's forward, cache and
shared query are the same for both. Owns no state beyond the modules it reads.
"""
from __future__ import annotations

import itertools
from typing import Sequence as Seq

import torch

from server.classifier_support import SIGMOID, activation_of, is_sequence_classifier
from server.model_support import final_logits
from server.sequence import Sequence


class LmHead:
    def __init__(self, model) -> None:
        self._config = model.config
        self._lm_head = model.get_output_embeddings()

    @property
    def vocab_size(self) -> int:
        return self._lm_head.out_features

    def scores(self, hidden: torch.Tensor, sequences: Seq[Sequence]) -> list[list[float]]:
        logits = final_logits(self._config, self._lm_head(hidden)).float()
        return label_scores(logits, sequences)


class ClassifierHead:
    """Transformers' GenericForSequenceClassification: `score` (no bias) over the decoder's last
    hidden state, read at the last token. NOTE: transformers reads it at the last token that is not
    pad_token_id; a sequence the server runs has no padding, so that is its last token unless the
    text itself ends in the pad token."""

    def __init__(self, model) -> None:
        self._score = model.score
        self.activation = activation_of(model.config)
        self.vocab_size = model.get_input_embeddings().num_embeddings

    def scores(self, hidden: torch.Tensor, sequences: Seq[Sequence]) -> list[list[float]]:
        return class_scores(self._score(hidden).float(), sequences, self.activation)


def head_of(model) -> LmHead | ClassifierHead:
    return ClassifierHead(model) if is_sequence_classifier(model.config) else LmHead(model)


def label_scores(logits: torch.Tensor, sequences: Seq[Sequence]) -> list[list[float]]:
    """Per row: exp(logprob) of each label over the full vocabulary, or, with apply_softmax, a
    softmax over the label logits only (each row sums to 1)."""
    logprobs = torch.log_softmax(logits, dim=-1)
    per_row = []
    for row, seq in enumerate(sequences):
        labels = torch.tensor(seq.request.options.label_token_ids, device=logits.device)
        if seq.request.options.apply_softmax:
            per_row.append(torch.softmax(logits[row, labels], dim=-1))
        else:
            per_row.append(torch.exp(logprobs[row, labels]))
    return _to_rows(per_row)


def class_scores(logits: torch.Tensor, sequences: Seq[Sequence], activation: str) -> list[list[float]]:
    """Per row, a classifier's logits [batch, num_labels] as the classes its request names
    (label_token_ids are class indices here): after the activation over all classes with
    apply_softmax (what /classify and the reranks send), else raw (TEI's raw_scores)."""
    activated = torch.sigmoid(logits) if activation == SIGMOID else torch.softmax(logits, dim=-1)
    per_row = []
    for row, seq in enumerate(sequences):
        classes = torch.tensor(seq.request.options.label_token_ids, device=logits.device)
        per_row.append((activated if seq.request.options.apply_softmax else logits)[row, classes])
    return _to_rows(per_row)


def _to_rows(per_row: list[torch.Tensor]) -> list[list[float]]:
    flat = iter(torch.cat(per_row).tolist())  # one device-to-host copy for the group, not per row
    return [list(itertools.islice(flat, len(row_scores))) for row_scores in per_row]
