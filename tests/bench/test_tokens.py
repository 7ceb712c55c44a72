"""bench.tokens: the server's computed/padding counters, parsed from a real /metrics page."""
import pytest

from bench.tokens import TokenCounts, parse_token_counts
from server.metrics import ServerMetrics
from server.scheduler import Load


def metrics_page(num_computed: int, num_padding: int) -> str:
    metrics = ServerMetrics("m", 100, lambda: Load(0, 0, 0, 0))
    metrics.observe_computed_tokens(num_computed, num_padding)
    return metrics.render().decode()


def test_counters_are_read_from_the_servers_page():
    assert parse_token_counts(metrics_page(1000, 250)) == TokenCounts(1000, 250)


def test_a_run_is_the_difference_of_two_reads():
    run = parse_token_counts(metrics_page(1500, 300)) - parse_token_counts(metrics_page(1000, 250))
    assert (run.num_computed, run.num_padding, run.num_real) == (500, 50, 450)
    assert run.padding_fraction == pytest.approx(0.1)


def test_a_page_without_the_counters_reads_zero():
    assert parse_token_counts("# nothing here\n") == TokenCounts(0, 0)
    assert TokenCounts().padding_fraction == 0.0
