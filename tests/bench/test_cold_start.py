"""bench.cold_start: what it reads from a server's log, the cache copy, and (slow) a whole run on a
tiny model folder: a cold and a warm wake from zero through the real gateway, each answered 200,
printed as a table (never how fast)."""
from __future__ import annotations

import json

import pytest

from bench.cold_start import Wake, cached_path, copy_paced, format_table, main, model_bytes, server_times
from tests.kit.models import build_tiny_model


def test_server_times_reads_the_servers_start_lines():
    log = ("2026-12-01 INFO server: loading model /m (cpu, float32)\n"
           "2026-12-01 INFO server: model m loaded in 12.3 s (2 threads)\n"
           "2026-12-01 INFO server: ready in 14.1 s after start; serving on 127.0.0.1:1\n")
    assert server_times(log) == (12.3, 14.1)
    assert server_times("nothing yet") == (None, None)


def test_a_folder_and_a_file_are_copied_whole_into_the_cache(tmp_path):
    hub = tmp_path / "hub" / "model"
    (hub / "sub").mkdir(parents=True)
    (hub / "config.json").write_text("{}")
    (hub / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 5000)
    target = cached_path(hub, tmp_path / "cache")
    copy_paced(hub, target, mb_per_s=50)
    assert (target / "sub" / "weights.bin").read_bytes() == (hub / "sub" / "weights.bin").read_bytes()
    assert model_bytes(target) == model_bytes(hub) == 2 + 256 * 5000
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" * 10)
    file_target = cached_path(gguf, tmp_path / "cache2")
    copy_paced(gguf, file_target.parent, mb_per_s=0)
    assert file_target.read_bytes() == gguf.read_bytes()


@pytest.mark.slow
def test_a_run_wakes_a_cold_and_a_warm_pod_and_prints_the_figures(tmp_path, capsys):
    model = build_tiny_model(tmp_path / "hub" / "tiny")
    assert main(["--model-path", str(model), "--runs", "1", "--threads", "1", "--json"]) == 0
    wakes = json.loads(capsys.readouterr().out)
    assert [(w["case"], w["status"]) for w in wakes] == [("cold", 200), ("warm", 200)]
    for wake in wakes:
        assert wake["answer_s"] > 0 and wake["model_mib"] > 0
        assert wake["load_s"] is not None and wake["ready_s"] is not None  # the server's own lines
    assert wakes[1]["download_s"] == 0 < wakes[0]["download_s"]


def test_the_table_gives_each_wake_and_the_cold_over_warm_ratio_of_the_medians():
    wakes = [Wake("cold", 1, 200, 40.0, 12.0, 1137.0, 18.0, 30.0),
             Wake("warm", 1, 200, 20.0, 0.0, 1137.0, 17.0, 16.0)]
    table = format_table(wakes)
    assert "| cold | 1 | 200 | 40.00 | 12.00 | 18.0 | 30.0 | 42.0 | -2.0 |" in table
    assert "| warm | 1 | 200 | 20.00 | 0.00 | 17.0 | 16.0 | 16.0 | 4.0 |" in table
    assert table.endswith("cold 40.00 s, warm 20.00 s, cold / warm 2.00")
