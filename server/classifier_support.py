"""Which sequence-classification checkpoints (*ForSequenceClassification) the server serves, and
how their scores read. Pure: reads a transformers config, imports nothing heavy.

Two kinds. Encoder cross-encoders (BERT, RoBERTa, XLM-RoBERTa: bge-reranker-*, ms-marco
MiniLM): bidirectional attention, so a query cannot be computed once for its documents; each pair
runs whole, padded in a batch, through the family's own model and head (encoder_runner.py).
Decoders with a last-token head (`score`, GenericForSequenceClassification: Qwen2/3, Llama,
Mistral, Gemma: Qwen3-Reranker-seq-cls, mxbai-rerank-v2, reward models): causal, so the runner's
shared-query path serves them; only the head differs (heads.py). The activation is TEI's and
vLLM's: sigmoid for one label (a relevance), softmax over the labels otherwise.
"""
from __future__ import annotations

ENCODER_FAMILIES = {"bert", "roberta", "xlm-roberta"}
DECODER_FAMILIES = {"qwen2", "qwen3", "llama", "mistral", "gemma"}  # their head: score at the last token
# RoBERTa's positions start after padding_idx (create_position_ids_from_input_ids): 2 fewer usable.
POSITION_OFFSET = {"roberta": 2, "xlm-roberta": 2}
SIGMOID, SOFTMAX = "sigmoid", "softmax"


def is_sequence_classifier(config) -> bool:
    """The checkpoint's architecture is a *ForSequenceClassification (config.architectures)."""
    return any(name.endswith("ForSequenceClassification") for name in
               getattr(config, "architectures", None) or ())


def is_encoder(config) -> bool:
    return getattr(config, "model_type", None) in ENCODER_FAMILIES


def classifier_reason(config) -> str | None:
    """None if the server scores this sequence classifier; else why not. Decoders must also pass
    model_support.unsupported_reason (their attention)."""
    model_type = getattr(config, "model_type", None)
    if model_type in ENCODER_FAMILIES or model_type in DECODER_FAMILIES:
        return None
    return (f"sequence classification is served for {', '.join(sorted(ENCODER_FAMILIES))} (encoders) "
            f"and {', '.join(sorted(DECODER_FAMILIES))} (decoders), not model type '{model_type}'")


def encoder_reason(config) -> str | None:
    """An encoder checkpoint without a classification head (an embedding model, a masked LM)."""
    if is_encoder(config) and not is_sequence_classifier(config):
        return (f"model type '{config.model_type}' is served only as a cross-encoder "
                "(*ForSequenceClassification); this checkpoint has no classification head")
    return None


def activation_of(config) -> str:
    """num_labels 1: sigmoid (a relevance in [0, 1], as TEI and vLLM); else softmax over labels."""
    return SIGMOID if config.num_labels == 1 else SOFTMAX


def labels_of(config) -> tuple[str, ...]:
    """The class names in index order, from id2label (keys may be strings in a config.json)."""
    id2label = {int(key): value for key, value in (getattr(config, "id2label", None) or {}).items()}
    return tuple(str(id2label.get(index, f"LABEL_{index}")) for index in range(config.num_labels))


def encoder_context_tokens(config) -> int:
    """The longest sequence the encoder's position embeddings take."""
    return int(config.max_position_embeddings) - POSITION_OFFSET.get(config.model_type, 0)
