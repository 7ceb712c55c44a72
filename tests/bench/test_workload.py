"""bench.workload: the seeded workload, Poisson send times and percentiles (pure)."""
import math

import pytest

from bench.workload import (
    MIN_TOKEN_ID,
    MIXED,
    Workload,
    make_bodies,
    median,
    num_tokens,
    percentile,
    poisson_send_times,
)


@pytest.mark.parametrize("values, q, expected", [
    ([5.0], 50, 5.0),
    ([1.0, 2.0, 3.0, 4.0], 50, 2.5),               # interpolated between the middle two
    ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
    ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
    ([4.0, 1.0, 3.0, 2.0], 90, 3.7),               # order of input does not matter
    (list(map(float, range(1, 101))), 99, 99.01),  # numpy.percentile gives the same
], ids=["one", "even-median", "min", "max", "unsorted-p90", "p99-of-100"])
def test_percentile(values, q, expected):
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_nan():
    assert math.isnan(percentile([], 50))


def test_median_is_p50():
    assert median([3.0, 1.0, 2.0]) == 2.0


def test_make_bodies_has_the_asked_shape_and_valid_ids():
    workload = Workload(num_items=3, query_tokens=5, item_tokens=7, label_ids=(1, 2),
                        vocab_size=200)
    bodies = make_bodies(workload, 4, seed=1)
    assert len(bodies) == 4
    for body in bodies:
        assert len(body.query) == 5 and [len(item) for item in body.items] == [7, 7, 7]
        assert all(MIN_TOKEN_ID <= i < 200 for i in body.query + sum(body.items, ()))
        assert body.to_json()["label_token_ids"] == [1, 2]
    assert len({body.query for body in bodies}) == 4  # distinct requests: no accidental sharing


def test_make_bodies_is_reproducible_from_the_seed():
    workload = Workload()
    assert make_bodies(workload, 2, seed=7) == make_bodies(workload, 2, seed=7)
    assert make_bodies(workload, 2, seed=7) != make_bodies(workload, 2, seed=8)


@pytest.mark.parametrize("fields, message", [
    ({"num_items": 0}, "num_items"),
    ({"query_tokens": 0}, "query_tokens"),
    ({"label_ids": ()}, "label_ids"),
    ({"label_ids": (9230, 60000)}, "outside the vocabulary"),
    ({"vocab_size": 50}, "vocab_size"),
], ids=["no-items", "empty-query", "no-labels", "label-beyond-vocab", "vocab-too-small"])
def test_workload_rejects(fields, message):
    with pytest.raises(ValueError, match=message):
        Workload(**fields)


def test_poisson_send_times_start_at_zero_stay_in_the_window_and_grow():
    times = poisson_send_times(rate_per_s=100, duration_s=10, seed=3)
    assert times[0] == 0.0
    assert all(0 <= t < 10 for t in times)
    assert times == sorted(times)
    # A Poisson count of mean 1000 has sd ~32; this seed's count lies well inside 5 sd.
    assert 840 < len(times) < 1160


def test_poisson_send_times_are_reproducible_and_open_loop():
    times = poisson_send_times(5, 20, seed=1)
    assert times == poisson_send_times(5, 20, seed=1)
    gaps = {round(b - a, 9) for a, b in zip(times, times[1:])}
    assert len(gaps) > 10  # exponential gaps, not a fixed period


@pytest.mark.parametrize("rate, duration", [(0, 1), (1, 0), (-1, 5)],
                         ids=["zero-rate", "zero-duration", "negative-rate"])
def test_poisson_send_times_reject(rate, duration):
    with pytest.raises(ValueError):
        poisson_send_times(rate, duration, seed=0)


def test_mixed_lengths_stay_in_their_ranges_and_are_seeded():
    bodies = make_bodies(MIXED, 40, seed=3)
    queries = [len(body.query) for body in bodies]
    items = [len(item) for body in bodies for item in body.items]
    assert 40 <= min(queries) and max(queries) <= 200 and len(set(queries)) > 10
    assert 20 <= min(items) and max(items) <= 340 and len(set(items)) > 50
    assert 120 * 0.8 < sum(queries) / len(queries) < 120 * 1.2  # the uniform workload's means
    assert 180 * 0.9 < sum(items) / len(items) < 180 * 1.1
    assert make_bodies(MIXED, 40, seed=3) == bodies
    assert num_tokens(bodies[0]) == queries[0] + sum(items[:10])


def test_a_bad_range_is_refused():
    with pytest.raises(ValueError, match="item_tokens_range"):
        Workload(item_tokens_range=(30, 20))
