"""Computed tokens of a server run, read from the server's own counters, so a benchmark reports the
padding the forwards really computed instead of estimating it from the workload.

The server counts, per forward, every token position it pushed through the model and how many of
them were padding (`sglang:computed_tokens_total`, `sglang:padding_tokens_total` on /metrics).
"""
from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

COMPUTED = "sglang:computed_tokens"
PADDING = "sglang:padding_tokens"


@dataclass(frozen=True)
class TokenCounts:
    """Cumulative (or, as a difference, one run's) computed and padding token positions."""

    num_computed: float = 0.0
    num_padding: float = 0.0

    def __sub__(self, earlier: TokenCounts) -> TokenCounts:
        return TokenCounts(self.num_computed - earlier.num_computed,
                           self.num_padding - earlier.num_padding)

    @property
    def num_real(self) -> float:
        """Computed positions that were real tokens: queries once, every item."""
        return self.num_computed - self.num_padding

    @property
    def padding_fraction(self) -> float:
        return self.num_padding / self.num_computed if self.num_computed else 0.0


def parse_token_counts(text: str) -> TokenCounts:
    """The two counters from a Prometheus text page (0 for a counter the page lacks)."""
    values = {family.name: sum(s.value for s in family.samples if s.name.endswith("_total"))
              for family in text_string_to_metric_families(text)
              if family.name in (COMPUTED, PADDING)}
    return TokenCounts(values.get(COMPUTED, 0.0), values.get(PADDING, 0.0))


def read_token_counts(url: str, timeout_s: float = 10.0) -> TokenCounts:
    """GET {url}/metrics (a loopback server the caller started) and parse the counters."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=timeout_s) as response:
        return parse_token_counts(response.read().decode())
