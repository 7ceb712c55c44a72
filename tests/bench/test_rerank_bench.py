"""bench/rerank.py prints both cases' figures from one run (what it prints, never how fast): the real
app and scheduler over a runner that costs nothing, with a one-character-label template."""
from __future__ import annotations

import json

from bench import rerank
from bench.free_server import FreeRunner
from bench.server_process import free_port
from server.config import ServerConfig
from server.engine import Engine
from server.rerank import Reranker
from server.rerank_templates import parse_template
from tests.kit.servers import live_server

TEMPLATE = parse_template({"query": "Q:{query}\n", "document": "D:{document}\nA:", "yes": "y", "no": "n"}, "t")


def test_it_prints_rerank_and_independent_figures(capsys):
    config = ServerConfig(host="127.0.0.1", port=free_port()).resolve("cpu", "float32")
    runner = FreeRunner()
    with live_server(config, Engine(config, runner), Reranker.create(TEMPLATE, runner.tokenize)) as url:
        assert rerank.main(["--url", url, "--documents", "4", "--doc-words", "5", "--rounds", "2",
                            "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["documents"] == 4 and result["rounds"] == 2 and result["template"] == "t"
    for case in ("rerank", "independent"):
        assert result[case]["documents_per_s"] > 0
        assert result[case]["computed_tokens_per_rerank"] == 0  # FreeRunner computes nothing
    assert result["max_score_difference"] == 0.0


def test_the_report_names_both_cases_and_the_ratios():
    figures = {"documents_per_s": 10.0, "computed_tokens_per_rerank": 100.0, "padding_tokens_per_rerank": 0.0}
    text = rerank.report({"template": "t", "documents": 20, "rounds": 1, "load_average_1m": 1.0,
                          "max_score_difference": 0.0, "rerank": {**figures, "documents_per_s": 30.0},
                          "independent": {**figures, "computed_tokens_per_rerank": 400.0}})
    assert "3.00x documents/s, 4.00x fewer computed tokens" in text
