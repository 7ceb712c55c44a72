"""What a request's `model` selects (server/served_models.py), tabled; every route with a `model`
answers a name not served with a 404 in the error shape naming the served names and adapters, before
it looks at anything else; /v1/models lists the served names and the adapters (vLLM's shape)."""
from __future__ import annotations

import httpx
import pytest

from scoringfleet_contract.facts import error_body
from server.config import parse_args
from server.errors import NotFound
from server.served_models import ServedModels
from tests.kit.runners import FakeRunner
from tests.kit.servers import serving

SERVED = ServedModels(("scorer", "qwen3:8b"), ("sql", "chat"))


@pytest.mark.parametrize(("model", "adapter"), [
    (None, None), ("", None), ("scorer", None), ("qwen3:8b", None),  # absent, empty, any served name
    ("sql", "sql"), ("scorer:sql", "sql"), ("qwen3:8b:chat", "chat"),  # by name, or <served>:<adapter>
], ids=["absent", "empty", "primary", "alias-with-colon", "adapter", "base-colon-adapter", "alias-colon-adapter"])
def test_resolve(model, adapter):
    assert SERVED.resolve(model) == adapter


@pytest.mark.parametrize("model", ["other", "scorer:nope", "other:sql", "scorer:", ":sql", "SCORER"],
                         ids=["unknown", "unknown-adapter", "unknown-base", "empty-adapter", "empty-base", "case"])
def test_anything_else_is_a_404_naming_what_is_served(model):
    with pytest.raises(NotFound) as raised:
        SERVED.resolve(model)
    assert raised.value.message == (f"model {model!r} is not served here; served: 'scorer', 'qwen3:8b'; "
                                    "LoRA adapters: 'sql' (or 'scorer:sql'), 'chat' (or 'scorer:chat')")


@pytest.mark.parametrize(("argv", "says"), [
    (["--lora-paths", "sql"], "NAME=PATH pairs"),
    (["--lora-paths", "a:b=/x"], "may not contain ':'"),
    (["--served-model-name", "s", "--lora-paths", "s=/x"], "also a served model name"),
    (["--lora-paths", "a=/x", "a=/y"], "given twice"),
], ids=["no-path", "colon", "clash", "twice"])
def test_bad_lora_paths_are_a_usage_error(argv, says, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2 and says in capsys.readouterr().err


ROUTES = [  # (path, body) of every route whose body has a `model`
    ("/v1/score", {"query": [1, 2], "items": [[3]], "label_token_ids": [4]}),
    ("/v1/score", {"text_1": "a", "text_2": "b"}),
    ("/score", {"text_1": "a", "text_2": "b"}),
    ("/v1/rerank", {"query": "q", "documents": ["d"]}),
    ("/v2/rerank", {"query": "q", "documents": ["d"]}),
    ("/classify", {"input": "a"}),
    ("/v1/classify", {"input": "a"}),
]


@pytest.fixture(scope="module")
def served():
    with serving(FakeRunner(), served_model_name=("scorer", "alias"), lora_paths=("sql=/adapters/sql",)) as (url, _):
        yield url


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=[f"{p}-{'+'.join(b)}" for p, b in ROUTES])
def test_every_route_answers_a_model_not_served_with_a_404(served, path, body):
    response = httpx.post(served + path, json={**body, "model": "gpt-4"}, timeout=10)
    assert response.status_code == 404
    assert response.json() == error_body(404, "model 'gpt-4' is not served here; served: 'scorer', 'alias'; "
                                              "LoRA adapters: 'sql' (or 'scorer:sql')")


@pytest.mark.parametrize("model", [None, "scorer", "alias", "sql", "scorer:sql"])
def test_a_served_name_or_adapter_scores_and_is_echoed(served, model):
    body = {"query": [1, 2], "items": [[3]], "label_token_ids": [4], **({"model": model} if model else {})}
    response = httpx.post(f"{served}/v1/score", json=body, timeout=10)
    assert response.status_code == 200 and response.json()["model"] == (model or "scorer")


def test_v1_models_lists_the_served_names_then_the_adapters(served):
    models = httpx.get(f"{served}/v1/models", timeout=10).json()
    assert models["object"] == "list"
    assert [(m["id"], m["root"], m["parent"], m["object"], m["owned_by"]) for m in models["data"]] == [
        ("scorer", "default", None, "model", "scoring-fleet"), ("alias", "default", None, "model", "scoring-fleet"),
        ("sql", "/adapters/sql", "scorer", "model", "scoring-fleet")]
    assert all(isinstance(m["created"], int) for m in models["data"])


def test_server_info_shows_the_names_and_adapters(served):
    info = httpx.get(f"{served}/get_server_info", timeout=10).json()
    assert (info["served_model_name"], info["served_model_names"]) == ("scorer", ["scorer", "alias"])
    assert info["lora_paths"] == {"sql": "/adapters/sql"}
