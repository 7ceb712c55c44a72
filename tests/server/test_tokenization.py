"""Text is scored as SGLang scores it: over `tokenizer(query + item)["input_ids"]`, the BOS the
tokenizer adds included, once, in front of whichever part comes first. A tiny random Llama and
Gemma with a Llama-3-style tokenizer (a <bos> post-processor), served over real HTTP; every score
against a plain transformers forward over the joined string's ids (float32, within 1e-4).
Items begin with a space, where separate tokenization and the joined string's agree (the seam,
the one documented difference, is elsewhere)."""
from __future__ import annotations

import httpx
import pytest
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

from bench.server_process import free_port
from server.__main__ import build_engine, resolve_config
from server.config import ServerConfig
from tests.kit.models import build_tiny_model
from tests.kit.servers import live_server

QUERY = "What is the capital of California? Answer Yes or No for each of the following options:"
ITEMS = [" Sacramento", " San Jose San Francisco", " Yes", " apple banana fruit car"]
LABELS = [2, 7, 40]


@pytest.fixture(scope="module")
def bos_model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama-bos"), bos=True)


def gemma_dir(bos_model_dir, folder):
    """The same tokenizer, a tiny random Gemma (full attention, embedding scaling)."""
    tokenizer = AutoTokenizer.from_pretrained(bos_model_dir)
    torch.manual_seed(0)
    config = transformers.GemmaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=8, initializer_range=0.2, max_position_embeddings=256,
                                      bos_token_id=tokenizer.bos_token_id)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module", params=["llama", "gemma"])
def served(request, bos_model_dir, tmp_path_factory):
    folder = (bos_model_dir if request.param == "llama"
              else gemma_dir(bos_model_dir, tmp_path_factory.mktemp("tiny-gemma-bos")))
    config = resolve_config(ServerConfig(model_path=str(folder), dtype="float32", device="cpu",
                                         port=free_port()))
    engine = build_engine(config)
    with live_server(config, engine) as url, httpx.Client(base_url=url, timeout=60) as client:
        yield client, engine.runner


@torch.inference_mode()
def reference(model, ids: list[int], apply_softmax: bool) -> list[float]:
    logits = model(torch.tensor([ids])).logits[0, -1].float()
    if apply_softmax:
        return torch.softmax(logits[LABELS], dim=-1).tolist()
    return torch.exp(torch.log_softmax(logits, dim=-1)[LABELS]).tolist()


def check(served, texts: list[str], **body) -> None:
    client, runner = served
    response = client.post("/v1/score", json={"label_token_ids": LABELS, **body})
    assert response.status_code == 200, response.text
    joined = [runner.tokenizer(text)["input_ids"] for text in texts]
    assert all(ids[0] == runner.tokenizer.bos_token_id for ids in joined)  # the BOS is in them
    for row, ids in zip(response.json()["scores"], joined):
        expected = reference(runner.model, ids, body.get("apply_softmax", False))
        assert row == pytest.approx(expected, rel=1e-4), (row, expected)
    usage = response.json()["usage"]["prompt_tokens"]
    assert usage == sum(len(ids) for ids in joined)  # the BOS is counted: it is computed


def test_text_scores_equal_a_forward_over_the_joined_strings_ids_bos_included(served):
    check(served, [QUERY + item for item in ITEMS], query=QUERY, items=ITEMS)


def test_item_first_puts_the_bos_in_front_of_the_item(served):
    query = " Is this a fruit? Answer:"
    check(served, [item + query for item in ITEMS], query=query, items=ITEMS, item_first=True,
          apply_softmax=True)


def test_token_ids_are_scored_as_sent_without_a_bos(served):
    client, runner = served
    ids = runner.tokenizer(QUERY, add_special_tokens=False)["input_ids"]
    response = client.post("/v1/score", json={"query": ids, "items": [[5, 6]],
                                              "label_token_ids": LABELS})
    assert response.json()["scores"][0] == pytest.approx(
        reference(runner.model, ids + [5, 6], False), rel=1e-4)
