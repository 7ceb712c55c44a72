"""The pure verdicts of tests/reliability/checks.py: which answers and load samples break the contract."""
from __future__ import annotations

import pytest

from bench.reliability import Answer, LoadSample, build_report
from tests.reliability.checks import answer_problems, queue_problems, run_problems

OK, FULL, LATE = Answer(200), Answer(503, "1"), Answer(504)

ANSWERS = {
    "all-allowed": ([OK, FULL, LATE], []),
    "nothing-sent": ([], []),
    "a-500": ([OK, Answer(500)], ["statuses outside (200, 503, 504): {500: 1}"]),
    "a-502-and-two-400": ([Answer(502), Answer(400), Answer(400)],
                          ["statuses outside (200, 503, 504): {400: 2, 502: 1}"]),
    "503-without-retry-after": ([Answer(503)], ["1 answers 503 without a Retry-After in seconds"]),
    "503-with-a-date-retry-after": ([Answer(503, "Wed, 21 Oct 2026 07:28:00 GMT")],
                                    ["1 answers 503 without a Retry-After in seconds"]),
    "no-answer": ([Answer(0, error="ServerDisconnectedError"), OK],
                  ["requests without an HTTP answer: {'ServerDisconnectedError': 1}"]),
}


@pytest.mark.parametrize("answers, problems", ANSWERS.values(), ids=ANSWERS.keys())
def test_answer_problems(answers, problems):
    assert answer_problems(answers) == problems


SAMPLES = {
    "within-cap": ([LoadSample(4, 0), LoadSample(4, 64)], 64, []),
    "above-cap": ([LoadSample(4, 65), LoadSample(4, 70)], 64,
                  ["2 samples waiting above the cap 64 (max 70)"]),
    "negative": ([LoadSample(-1, 0)], 64, ["1 samples with negative counts"]),
    "no-samples": ([], 64, []),
}


@pytest.mark.parametrize("samples, cap, problems", SAMPLES.values(), ids=SAMPLES.keys())
def test_queue_problems(samples, cap, problems):
    assert queue_problems(samples, cap) == problems


def test_a_report_counts_by_status_and_fails_when_the_gauges_never_settle():
    report = build_report(10.0, 20.0, [OK, OK, FULL, Answer(503)], [LoadSample(4, 8)], None, 300.0)
    assert (report.num_sent, report.by_status, report.peak_waiting) == (4, {"200": 2, "503": 2}, 8)
    assert report.num_503_without_retry_after == 1
    assert run_problems(report, 64) == ["1 answers 503 without a Retry-After in seconds",
                                        "the gauges did not return to 0 after the run"]
