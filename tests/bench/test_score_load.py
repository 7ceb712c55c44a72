"""`python -m bench.score_load` end to end against the real app over a free or holding runner:
the summary's fields, the failure accounting and the peaks, for a second or two of load."""
import json

import pytest

from bench import score_load
from bench.client import NotLoopback, check_loopback

ARGS = ["--num-items", "3", "--query-tokens", "4", "--item-tokens", "5", "--seed", "1"]


def run_json(capsys, url, *extra):
    assert score_load.main(["--url", url, *ARGS, "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_summary_counts_every_request_as_succeeded(capsys, free_url):
    summary = run_json(capsys, free_url, "--rate", "20", "--duration", "1")
    assert summary["num_sent"] >= 1
    assert summary["num_succeeded"] == summary["num_sent"] and summary["num_failed"] == 0
    assert summary["item_count"] == 3 and summary["distribution"] == "POISSON"
    assert summary["items_per_s"] > 0
    assert 0 <= summary["time_to_send_all_s"] < 1 <= summary["duration_s"]
    assert summary["time_to_complete_all_s"] >= summary["time_to_send_all_s"]
    assert 0 < summary["latency_p50_ms"] <= summary["latency_p90_ms"] <= summary["latency_p99_ms"]


def test_the_same_seed_sends_the_same_number_of_requests(capsys, free_url):
    first = run_json(capsys, free_url, "--rate", "30", "--duration", "0.5")
    second = run_json(capsys, free_url, "--rate", "30", "--duration", "0.5")
    assert first["num_sent"] == second["num_sent"]


def test_rejected_requests_are_counted_by_status(capsys, free_url):
    # Label id 60000 is beyond the FreeRunner's vocabulary, so every request is a 400.
    summary = run_json(capsys, free_url, "--rate", "20", "--duration", "0.5",
                       "--label-ids", "60000", "--vocab-size", "70000")
    assert summary["num_succeeded"] == 0
    assert summary["failed_by_status"] == {"400": summary["num_sent"]}


def test_peaks_show_the_queue_when_batches_take_time(capsys, holding_url):
    # Each batch holds 0.3 s and requests arrive at ~10/s: the 0.1 s sampler sees running
    # sequences and a queue behind them (0 and 0 if the gauges were not read live).
    summary = run_json(capsys, holding_url, "--rate", "10", "--duration", "1")
    assert summary["num_failed"] == 0
    assert summary["peak_running"] >= 3  # at least one 3-item request in a batch
    assert summary["peak_running"] + summary["peak_waiting"] <= 3 * summary["num_sent"]


def test_text_summary_has_bench_score_layout(capsys, free_url):
    assert score_load.main(["--url", free_url, *ARGS, "--rate", "10", "--duration", "0.3"]) == 0
    out = capsys.readouterr().out
    assert "SCORING LOAD RESULTS" in out and "Items/s achieved:" in out and "Peak waiting:" in out


def test_an_unreachable_server_is_an_error_not_a_summary(capsys):
    from bench.server_process import free_port

    assert score_load.main(["--url", f"http://127.0.0.1:{free_port()}", *ARGS]) == 1
    assert "cannot reach" in capsys.readouterr().err


@pytest.mark.parametrize("url, allowed", [
    ("http://127.0.0.1:30000", True),
    ("http://127.3.4.5:8000/", True),
    ("http://localhost:30000", True),
    ("http://[::1]:30000", True),
    ("http://10.0.0.1:30000", False),
    ("http://example.com", False),
    ("http://0.0.0.0:30000", False),
], ids=["127-0-0-1", "other-127", "localhost", "ipv6-loopback", "private", "name", "any"])
def test_check_loopback(url, allowed):
    if allowed:
        assert check_loopback(url) == url.rstrip("/")
    else:
        with pytest.raises(NotLoopback):
            check_loopback(url)


def test_a_non_loopback_url_exits_with_usage_error():
    with pytest.raises(SystemExit) as exit_info:
        score_load.main(["--url", "http://10.1.2.3:30000", "--duration", "1"])
    assert exit_info.value.code == 2
