"""The reliability contract as pure verdicts: which answers, load samples and runs break it.

Every request gets exactly one answer, 200, 503 with a Retry-After in seconds, or 504; nothing else,
no request without an answer; waiting never above the cap, no negative count; the gauges return to 0.
bench/reliability.py measures and prints; these functions judge what it measured.
"""
from __future__ import annotations

from collections import Counter

from bench.reliability import NO_ANSWER, Answer, LoadSample, RunReport

ALLOWED = (200, 503, 504)


def answer_problems(answers: list[Answer]) -> list[str]:
    """Why these answers break the contract: statuses outside ALLOWED, a 503 without a numeric
    Retry-After, requests without any answer. Empty when all is well."""
    problems = []
    others = Counter(a.status for a in answers if a.status not in ALLOWED and a.status != NO_ANSWER)
    if others:
        problems.append(f"statuses outside {ALLOWED}: {dict(sorted(others.items()))}")
    no_retry = sum(1 for a in answers if a.status == 503 and not (a.retry_after or "").isdigit())
    if no_retry:
        problems.append(f"{no_retry} answers 503 without a Retry-After in seconds")
    lost = Counter(a.error for a in answers if a.status == NO_ANSWER)
    if lost:
        problems.append(f"requests without an HTTP answer: {dict(sorted(lost.items()))}")
    return problems


def queue_problems(samples: list[LoadSample], max_waiting: int) -> list[str]:
    """A sample above the waiting cap, or a negative count, is a broken scheduler invariant."""
    over = [s.waiting for s in samples if s.waiting > max_waiting]
    negative = [s for s in samples if s.running < 0 or s.waiting < 0]
    problems = []
    if over:
        problems.append(f"{len(over)} samples waiting above the cap {max_waiting} (max {max(over)})")
    if negative:
        problems.append(f"{len(negative)} samples with negative counts")
    return problems


def run_problems(report: RunReport, max_waiting: int) -> list[str]:
    """Everything wrong with one overload run; empty when it kept the contract."""
    problems = answer_problems(report.answers) + queue_problems(report.samples, max_waiting)
    if report.settled_s is None:
        problems.append("the gauges did not return to 0 after the run")
    return problems
