"""Random sequence classifiers saved as checkpoints, for the classifier tests (tiny) and
bench.cross_encoder (small: MiniLM-L12's shape for the encoders, a 6-layer decoder): encoder
cross-encoders (BERT, XLM-RoBERTa) and decoders with a last-token head (Qwen2/3, Llama, Mistral,
Gemma), each with the byte-level BPE tokenizer the server tests use (bench.gpu.model), its pair
template set the way the family's real tokenizer pairs two texts. No hub: built from configs."""
from __future__ import annotations

from pathlib import Path

CORPUS = [
    "What is the capital of California? Answer Yes or No for each of the following options:",
    "Sacramento San Jose San Francisco Los Angeles Yes No apple banana fruit car red fast",
    "The quick brown fox jumps over the lazy dog. Is this a fruit? Answer:",
]
# What `small` changes of each family's tiny settings: a size where compute, not HTTP, is timed.
SMALL = {"encoder": dict(hidden_size=384, intermediate_size=1536, num_hidden_layers=12, num_attention_heads=12,
                         max_position_embeddings=512,
                         initializer_range=0.02),
         "decoder": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=6, num_attention_heads=8,
                         num_key_value_heads=4, head_dim=64, max_position_embeddings=1024, initializer_range=0.02)}
TINY_DECODER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
                     tie_word_embeddings=False, initializer_range=0.2)
TINY_ENCODER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     initializer_range=0.2)
# family -> (config class name, settings, pair template: single, pair, specials; token types?)
BERT_PAIR = ("[CLS] $A:0 [SEP]:0", "[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1", ["[CLS]", "[SEP]"], True)
ROBERTA_PAIR = ("<s> $A </s>", "<s> $A </s> </s> $B </s>", ["<s>", "</s>"], False)
BOS_PAIR = ("<bos> $A", "<bos> $A <bos> $B", ["<bos>"], False)  # Llama 3, Gemma
FAMILIES = {
    "bert": ("BertConfig", {**TINY_ENCODER, "max_position_embeddings": 128, "type_vocab_size": 2}, BERT_PAIR),
    "xlm-roberta": ("XLMRobertaConfig", {**TINY_ENCODER, "max_position_embeddings": 130,
                                         "type_vocab_size": 1}, ROBERTA_PAIR),
    "qwen3": ("Qwen3Config", TINY_DECODER, None),
    "qwen2": ("Qwen2Config", TINY_DECODER, None),
    "llama": ("LlamaConfig", TINY_DECODER, BOS_PAIR),
    "mistral": ("MistralConfig", TINY_DECODER, None),
    "gemma": ("GemmaConfig", TINY_DECODER, BOS_PAIR),
}
ENCODERS = ("bert", "xlm-roberta")
DECODERS = ("qwen3", "qwen2", "llama", "mistral", "gemma")


def build_classifier(folder: Path, family: str, num_labels: int = 1, labels: list[str] | None = None,
                     small: bool = False, corpus: list[str] = CORPUS) -> Path:
    """Save a seeded random *ForSequenceClassification of `family` and its tokenizer (trained on
    `corpus`) to `folder`; `small`: the benchmark's size, else tiny."""
    import torch
    import transformers

    from bench.gpu.model import save_tokenizer

    config_name, settings, pair = FAMILIES[family]
    if small:
        settings = {**settings, **SMALL["encoder" if family in ENCODERS else "decoder"]}
    fast = save_tokenizer(folder, corpus, vocab_size=400, repeats=20)
    if pair is not None:
        fast = with_pair_template(fast, *pair)
        fast.save_pretrained(folder)
    id2label = dict(enumerate(labels)) if labels else None
    config = getattr(transformers, config_name)(
        vocab_size=len(fast), pad_token_id=fast.pad_token_id, num_labels=num_labels,
        **({"id2label": id2label, "label2id": {v: k for k, v in id2label.items()}} if id2label else {}),
        **settings)
    torch.manual_seed(0)
    transformers.AutoModelForSequenceClassification.from_config(config).save_pretrained(folder)
    return folder


def with_pair_template(fast, single: str, pair: str, specials: list[str], token_types: bool):
    """A copy of a fast tokenizer whose post-processor puts `specials` around one text and a pair
    as the family's tokenizer does (BERT's token types, XLM-RoBERTa's doubled </s>, Llama 3's BOS)."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer.from_str(fast.backend_tokenizer.to_str())
    backend.add_special_tokens(specials)
    backend.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(token, backend.token_to_id(token)) for token in specials])
    names = ["input_ids", "token_type_ids", "attention_mask"] if token_types else ["input_ids", "attention_mask"]
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token=fast.pad_token, eos_token=fast.eos_token,
                                   model_input_names=names)
