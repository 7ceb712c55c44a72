"""A tiny random Llama with a real (byte-level BPE) tokenizer, for the mechanics of the real model."""
from __future__ import annotations

from pathlib import Path

CORPUS = [
    "What is the capital of California? Answer Yes or No for each of the following options:",
    "Sacramento San Jose San Francisco Los Angeles Yes No apple banana fruit car red fast",
    "The quick brown fox jumps over the lazy dog. Is this a fruit? Answer:",
]


def build_tiny_model(folder: Path, bos: bool = False) -> Path:
    """Save a 2-layer random Llama and a small byte-level BPE tokenizer to `folder`; with `bos`,
    the tokenizer puts a <bos> in front of every text, as Llama 3's does."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from bench.gpu.model import save_tokenizer

    fast = save_tokenizer(folder, CORPUS, vocab_size=400, repeats=20)
    if bos:
        fast = with_bos(fast)
        fast.save_pretrained(folder)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, tie_word_embeddings=False,
                         bos_token_id=fast.bos_token_id)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def with_bos(fast):
    """A copy of a fast tokenizer with a new <bos> token that its post-processor puts in front of
    every text (Llama 3's TemplateProcessing), so tokenizer(text) starts with it."""
    from tokenizers import Tokenizer, processors
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer.from_str(fast.backend_tokenizer.to_str())
    backend.add_special_tokens(["<bos>"])
    bos_id = backend.token_to_id("<bos>")
    backend.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", bos_id)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<bos>",
                                   pad_token=fast.pad_token, eos_token=fast.eos_token)
