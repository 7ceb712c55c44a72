"""bench.fanout_sim: the rule over simulated equal workers (deterministic: the token arithmetic
that chose --recompute-charge's default)."""
from bench.fanout_sim import fan_out, main, simulate

IDEAL = 36 * 800 + 6 * 2000  # the fan-out, each query computed once


def test_without_the_charge_a_burst_computes_every_query_on_every_worker():
    _, tokens, _ = simulate(fan_out(), concurrency=18, num_workers=3, charge=0)
    assert tokens == 36 * 800 + 3 * 6 * 2000  # 1.59x the ideal


def test_with_the_default_charge_each_query_is_computed_once_and_the_hot_query_spreads():
    span, tokens, _ = simulate(fan_out(), 18, 3, charge=3)
    assert tokens == IDEAL and abs(span - IDEAL / 3 / 1000) < 1e-6  # balanced: the ideal span
    hot = [("hot", 1500.0, 480.0)] * 24
    three, _, _ = simulate(hot, 24, 3, charge=3)
    one, _, _ = simulate(hot, 24, 1, charge=3)
    assert one / three > 1.3  # the bar for the hot query


def test_main_prints_a_row_per_charge(capsys):
    assert main(["--charges", "0", "3"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 3
