"""LoRA adapters end to end: `--lora-paths` loaded by the server's own start (load) on a tiny
Llama, requests of the base model and of two adapters sent at once over real HTTP score as peft's
merged forwards (float32, within 1e-5), by the adapter's name or `<served name>:<adapter>`; an
unknown adapter is a 404; an adapter the server cannot apply ends the start with exit 2 and one line."""
from __future__ import annotations

import concurrent.futures

import httpx
import pytest
import torch

from bench.lora_models import save_adapter
from bench.server_process import free_port
from server.__main__ import load, main
from server.config import ServerConfig
from server.engine import Engine
from server.model_loader import load_model
from tests.kit.servers import live_server
from tests.server.lora_support import merged_model, reference_scores

QUERY = "What is the capital of California? Answer Yes or No for each of the following options:"
ITEMS = ["Sacramento", " San Jose San Francisco Los Angeles", " Yes apple banana fruit car"]
LABELS = [5, 17, 42]


@pytest.fixture(scope="module")
def lora(tiny_model_dir, tmp_path_factory):
    """A live server over the tiny Llama with adapters `sql` and `chat`; yields (url, tokenizer,
    base model, {adapter: folder})."""
    base, tokenizer = load_model(str(tiny_model_dir), torch.device("cpu"), torch.float32)
    folder = tmp_path_factory.mktemp("lora-app")
    folders = {"sql": save_adapter(base, folder / "sql", seed=1),
               "chat": save_adapter(base, folder / "chat", seed=2, rank=2, target_modules=["q_proj", "v_proj"])}
    config, runner, reranker = load(ServerConfig(  # the server's own load: adapters, compile decision
        model_path=str(tiny_model_dir), dtype="float32", port=free_port(), served_model_name=("tiny", "tiny-alias"),
        lora_paths=tuple(f"{name}={path}" for name, path in folders.items())))
    with live_server(config, Engine(config, runner), reranker) as url:
        yield url, tokenizer, base, folders


def expected(lora, adapter: str | None) -> list[list[float]]:
    _, tokenizer, base, folders = lora
    model = merged_model(base, folders[adapter] if adapter else None)
    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    return [reference_scores(model, ids(QUERY) + ids(item), tuple(LABELS), False) for item in ITEMS]


def post_score(url: str, model: str | None) -> httpx.Response:
    body = {"query": QUERY, "items": ITEMS, "label_token_ids": LABELS, **({"model": model} if model else {})}
    return httpx.post(f"{url}/v1/score", json=body, timeout=30)


def test_requests_of_several_adapters_at_once_score_as_merged_forwards(lora):
    url = lora[0]
    models = [None, "sql", "tiny:chat", "tiny-alias:sql", "chat", "tiny"] * 2
    with concurrent.futures.ThreadPoolExecutor(len(models)) as pool:  # at once: they share batches
        responses = list(pool.map(lambda model: post_score(url, model), models))
    for model, response in zip(models, responses):
        assert response.status_code == 200, response.text
        adapter = None if model in (None, "tiny") else model.rpartition(":")[2]
        got, want = response.json()["scores"], expected(lora, adapter)
        assert max(abs(g - w) for got_row, want_row in zip(got, want) for g, w in zip(got_row, want_row)) < 1e-5
        assert response.json()["model"] == (model or "tiny")


def test_an_unknown_adapter_is_a_404_naming_the_adapters(lora):
    response = post_score(lora[0], "tiny:nope")
    assert response.status_code == 404
    assert response.json()["message"] == ("model 'tiny:nope' is not served here; served: 'tiny', 'tiny-alias'; "
                                          "LoRA adapters: 'sql' (or 'tiny:sql'), 'chat' (or 'tiny:chat')")


def test_v1_models_and_server_info_show_the_adapters(lora):
    url, _, _, folders = lora
    models = httpx.get(f"{url}/v1/models", timeout=10).json()["data"]
    assert [(m["id"], m["parent"]) for m in models] == [("tiny", None), ("tiny-alias", None), ("sql", "tiny"),
                                                        ("chat", "tiny")]
    info = httpx.get(f"{url}/get_server_info", timeout=10).json()
    assert info["lora_paths"] == {name: str(path) for name, path in folders.items()}
    assert (info["compile"], info["compile_reason"]) == ("off", "eager: LoRA adapters are applied by hooks a "
                                                                "compiled graph cannot take")
    assert (info["attention_backend"], info["attention_backend_reason"]) == (
        "torch", "our kernel computes bfloat16 on CPU only")  # this server runs float32


@pytest.mark.parametrize("case", ["missing-folder", "another-base-model", "dora"])
def test_an_adapter_the_server_cannot_apply_ends_the_start_with_2(tiny_model_dir, tmp_path, caplog, case):
    folder = tmp_path / "adapter"
    if case == "another-base-model":  # a wider Llama: every lora_A takes 32 features, not 64
        from transformers import LlamaConfig, LlamaForCausalLM

        other = LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64,
                                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2))
        save_adapter(other, folder, seed=1)
    elif case == "dora":
        save_adapter(load_model(str(tiny_model_dir), torch.device("cpu"), torch.float32)[0], folder, seed=1,
                     use_dora=True)
    says = {"missing-folder": "has no adapter_config.json", "another-base-model": "another base model",
            "dora": "DoRA"}[case]
    argv = ["--model-path", str(tiny_model_dir), "--port", str(free_port()), "--dtype", "float32",
            "--lora-paths", f"bad={folder}"]
    assert main(argv) == 2
    errors = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert len(errors) == 1 and errors[0].startswith(f"--lora-paths bad={folder}: ") and says in errors[0]
    assert "Traceback" not in caplog.text


def test_adapters_for_a_cross_encoder_end_the_start_with_2(tmp_path, caplog):
    from bench.classifier_models import build_classifier

    folder = build_classifier(tmp_path / "bert", "bert")
    assert main(["--model-path", str(folder), "--port", str(free_port()), "--lora-paths", f"x={tmp_path}"]) == 2
    assert "--lora-paths: LoRA adapters are served on decoder models; " in caplog.text
    assert "is a cross-encoder" in caplog.text and "Traceback" not in caplog.text
