"""What one load run amounts to: pure functions from per-request outcomes to SGLang bench_score's
summary (plus the server's peak gauges), and its text form. No I/O, no clock.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

from bench.workload import percentile

OK = 200
CLIENT_ERROR = 0  # status recorded when no HTTP response came back (refused, reset, timed out)


@dataclass(frozen=True)
class Outcome:
    """One request: when it was sent and answered (seconds from the run's start), and how."""

    status: int
    sent_s: float
    done_s: float
    num_items: int

    @property
    def latency_s(self) -> float:
        return self.done_s - self.sent_s


@dataclass(frozen=True)
class LoadPeaks:
    """The highest running / waiting sequence counts /get_load reported during the run."""

    peak_running: int = 0
    peak_waiting: int = 0
    num_samples: int = 0


@dataclass(frozen=True)
class Summary:
    duration_s: float
    target_rate_per_s: float
    item_count: int
    distribution: str
    num_sent: int
    num_succeeded: int
    num_failed: int
    failed_by_status: dict[str, int] = field(default_factory=dict)
    items_per_s: float = 0.0         # items of successful requests / time to complete all
    time_to_send_all_s: float = 0.0
    time_to_complete_all_s: float = 0.0
    latency_avg_ms: float = 0.0      # over successful requests
    latency_p50_ms: float = 0.0
    latency_p90_ms: float = 0.0
    latency_p99_ms: float = 0.0
    peak_running: int = 0
    peak_waiting: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(outcomes: list[Outcome], peaks: LoadPeaks, *, duration_s: float,
              target_rate_per_s: float, item_count: int, distribution: str) -> Summary:
    """Latencies and items/s count successful requests only; failures are counted by status."""
    ok = [o for o in outcomes if o.status == OK]
    failed = Counter(str(o.status) for o in outcomes if o.status != OK)
    latencies_ms = [o.latency_s * 1000 for o in ok]
    complete_s = max((o.done_s for o in outcomes), default=0.0)
    num_items = sum(o.num_items for o in ok)
    return Summary(
        duration_s=duration_s,
        target_rate_per_s=target_rate_per_s,
        item_count=item_count,
        distribution=distribution,
        num_sent=len(outcomes),
        num_succeeded=len(ok),
        num_failed=len(outcomes) - len(ok),
        failed_by_status=dict(sorted(failed.items())),
        items_per_s=num_items / complete_s if complete_s > 0 else 0.0,
        time_to_send_all_s=max((o.sent_s for o in outcomes), default=0.0),
        time_to_complete_all_s=complete_s,
        latency_avg_ms=sum(latencies_ms) / len(latencies_ms) if latencies_ms else 0.0,
        latency_p50_ms=percentile(latencies_ms, 50) if latencies_ms else 0.0,
        latency_p90_ms=percentile(latencies_ms, 90) if latencies_ms else 0.0,
        latency_p99_ms=percentile(latencies_ms, 99) if latencies_ms else 0.0,
        peak_running=peaks.peak_running,
        peak_waiting=peaks.peak_waiting,
    )


def format_summary(summary: Summary) -> str:
    """The human-readable block, one `label: value` per line (bench_score's layout)."""
    failed = ", ".join(f"{status}: {n}" for status, n in summary.failed_by_status.items())
    rows = [
        ("Duration", f"{summary.duration_s:g} s"),
        ("Target rate", f"{summary.target_rate_per_s:g} requests/s"),
        ("Item count", f"{summary.item_count}"),
        ("Distribution", summary.distribution),
        ("Requests sent", f"{summary.num_sent}"),
        ("Requests succeeded", f"{summary.num_succeeded}"),
        ("Requests failed", f"{summary.num_failed}" + (f" ({failed})" if failed else "")),
        ("Items/s achieved", f"{summary.items_per_s:.2f}"),
        ("Time to send all", f"{summary.time_to_send_all_s:.2f} s"),
        ("Time to complete all", f"{summary.time_to_complete_all_s:.2f} s"),
        ("Average latency", f"{summary.latency_avg_ms:.1f} ms"),
        ("P50 latency", f"{summary.latency_p50_ms:.1f} ms"),
        ("P90 latency", f"{summary.latency_p90_ms:.1f} ms"),
        ("P99 latency", f"{summary.latency_p99_ms:.1f} ms"),
        ("Peak running", f"{summary.peak_running} sequences"),
        ("Peak waiting", f"{summary.peak_waiting} sequences"),
    ]
    width = max(len(label) for label, _ in rows) + 1
    lines = ["=" * 16 + " SCORING LOAD RESULTS " + "=" * 16]
    lines += [f"{label + ':':<{width}} {value}" for label, value in rows]
    return "\n".join(lines)
