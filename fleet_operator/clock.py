"""Time: the one clock and the one RFC 3339 format the operator writes and reads.

The clock is passed in (OperatorContext.clock, scrape_pods(clock=...)); nothing else calls
datetime.now(). Pure apart from utc_now() itself.
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The real clock: an aware UTC datetime."""
    return datetime.now(timezone.utc)


def format_time(at: datetime) -> str:
    """RFC 3339 in UTC: "2026-11-29T18:42:05Z" (fractional seconds kept when present, so a
    decision's time read back by is_due or the history loses nothing)."""
    return at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    """The inverse of format_time; ValueError / TypeError on anything else."""
    return datetime.fromisoformat(text).astimezone(timezone.utc)
