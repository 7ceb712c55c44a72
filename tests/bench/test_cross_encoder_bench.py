"""bench/cross_encoder.py prints a row per family from one run (what it prints, never how fast): tiny
random checkpoints, a real server process each, float32, where the served scores equal the plain
batched forward's."""
from __future__ import annotations

import json

from bench import cross_encoder


def test_it_prints_a_cross_encoder_and_a_decoder_row(capsys):
    assert cross_encoder.main(["--tiny", "--documents", "3", "--doc-words", "6", "--rounds", "1",
                               "--dtype", "float32", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["documents"], result["rounds"], result["dtype"]) == (3, 1, "float32")
    assert [(row["family"], row["kind"]) for row in result["rows"]] == [("bert", "cross-encoder"),
                                                                         ("qwen3", "decoder seq-cls")]
    for row in result["rows"]:
        assert row["server_docs_per_s"] > 0 and row["plain_docs_per_s"] > 0
        assert row["ratio"] == row["server_docs_per_s"] / row["plain_docs_per_s"]
        assert row["max_score_difference"] < 1e-5  # float32: the same scores both ways
        assert row["server_compile"] in ("on", "off")


def test_the_report_names_both_paths_and_the_ratio():
    row = {"family": "bert", "kind": "cross-encoder", "server_docs_per_s": 30.0, "plain_docs_per_s": 20.0,
           "ratio": 1.5, "max_score_difference": 0.0, "server_compile": "off"}
    text = cross_encoder.report({"documents": 20, "rounds": 5, "dtype": "bfloat16", "threads": 2,
                                 "load_average_1m": 1.0, "rows": [row]})
    assert "server     30.0 docs/s" in text and "plain batched forward     20.0 docs/s" in text and "1.50x" in text
    assert "(server compiled: off)" in text
