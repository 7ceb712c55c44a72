"""bench.summary: outcomes -> bench_score's summary (pure), and its text form."""
import re

import pytest

from bench.summary import CLIENT_ERROR, LoadPeaks, Outcome, format_summary, summarize


def run_of(*outcomes):
    return summarize(list(outcomes), LoadPeaks(peak_running=20, peak_waiting=30, num_samples=9),
                     duration_s=2, target_rate_per_s=5, item_count=10, distribution="POISSON")


def test_counts_latencies_and_items_per_s_use_successes_only():
    summary = run_of(
        Outcome(200, sent_s=0.0, done_s=0.1, num_items=10),
        Outcome(200, sent_s=0.5, done_s=0.8, num_items=10),
        Outcome(503, sent_s=1.0, done_s=1.01, num_items=10),
        Outcome(CLIENT_ERROR, sent_s=1.5, done_s=2.0, num_items=10),
    )
    assert (summary.num_sent, summary.num_succeeded, summary.num_failed) == (4, 2, 2)
    assert summary.failed_by_status == {"0": 1, "503": 1}
    assert summary.items_per_s == pytest.approx(20 / 2.0)  # 20 ok items over 2 s to complete all
    assert summary.time_to_send_all_s == 1.5
    assert summary.time_to_complete_all_s == 2.0
    assert summary.latency_avg_ms == pytest.approx(200)
    assert summary.latency_p50_ms == pytest.approx(200)
    assert summary.latency_p99_ms == pytest.approx(100 + 200 * 0.99)
    assert (summary.peak_running, summary.peak_waiting) == (20, 30)


def test_a_run_where_everything_failed_reports_zeros_not_nan():
    summary = run_of(Outcome(503, 0.0, 0.01, 10))
    assert summary.num_failed == 1 and summary.items_per_s == 0.0
    assert summary.latency_p99_ms == 0.0


def test_an_empty_run_is_all_zero():
    summary = run_of()
    assert (summary.num_sent, summary.items_per_s, summary.time_to_complete_all_s) == (0, 0.0, 0.0)


def test_format_summary_prints_every_field_of_bench_score_and_the_peaks():
    text = format_summary(run_of(Outcome(200, 0.0, 0.25, 10), Outcome(503, 0.1, 0.2, 10)))
    for label in ("Duration:", "Target rate:", "Item count:", "Distribution:", "Requests sent:",
                  "Requests succeeded:", "Requests failed:", "Items/s achieved:",
                  "Time to send all:", "Time to complete all:", "Average latency:",
                  "P50 latency:", "P90 latency:", "P99 latency:", "Peak running:",
                  "Peak waiting:"):
        assert label in text
    assert re.search(r"Requests failed: +1 \(503: 1\)", text)
    assert re.search(r"P50 latency: +250.0 ms", text)


def test_to_dict_is_json_ready():
    import json

    assert json.loads(json.dumps(run_of(Outcome(200, 0, 1, 3)).to_dict()))["items_per_s"] == 3.0
