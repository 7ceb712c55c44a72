"""At start (server/__main__.build_reranker, on a tiny real model and tokenizer): a template given
with --rerank-template whose labels are not one token each stops the server (ModelLoadError: exit 2,
one line); the automatic one only leaves it without rerank routes; a file whose labels fit serves."""
from __future__ import annotations

import json
import logging

import pytest

from server.__main__ import build_reranker
from server.config import ServerConfig
from server.model_loader import ModelLoadError, load_model
from server.model_runner import ModelRunner


@pytest.fixture(scope="module")
def runner(tiny_model_dir):
    import torch

    model, tokenizer = load_model(str(tiny_model_dir), torch.device("cpu"), torch.float32)
    return ModelRunner(model, tokenizer)


def config(tiny_model_dir, template=None) -> ServerConfig:
    return ServerConfig(model_path=str(tiny_model_dir), rerank_template=template)


def test_a_flag_template_whose_labels_are_not_single_tokens_stops_the_start(tiny_model_dir, runner):
    # the tiny tokenizer splits " yes" into three tokens
    with pytest.raises(ModelLoadError, match=r"--rerank-template: rerank template yes-no: the '(no|yes)' "
                                             r"label ' (no|yes)' is 3 tokens"):
        build_reranker(config(tiny_model_dir, "yes-no"), runner)


def test_the_automatic_template_that_does_not_fit_leaves_no_rerank(tiny_model_dir, runner, caplog):
    with caplog.at_level(logging.WARNING, logger="server"):
        assert build_reranker(config(tiny_model_dir), runner) is None
    assert "no /v1/rerank: rerank template yes-no" in caplog.text


def test_a_template_file_whose_labels_fit_serves(tiny_model_dir, runner, tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"query": "{query}", "document": "{document}", "yes": " Yes", "no": " No"}))
    reranker = build_reranker(config(tiny_model_dir, str(path)), runner)
    assert (reranker.no_id, reranker.yes_id) == (runner.tokenize(" No")[0], runner.tokenize(" Yes")[0])


def test_a_missing_template_file_stops_the_start(tiny_model_dir, runner, tmp_path):
    with pytest.raises(ModelLoadError, match="neither a built-in .* nor a file"):
        build_reranker(config(tiny_model_dir, str(tmp_path / "absent.json")), runner)
