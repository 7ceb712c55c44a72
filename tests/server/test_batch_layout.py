"""plan_groups: every row once, shortest first, padding bounded per group."""
import pytest

from server.batch_layout import max_forward_tokens, plan_groups


def rows_of(groups):
    return [group.rows for group in groups]


@pytest.mark.parametrize("own, prefix, fraction, expected", [
    ([5, 5, 5], [3, 3, 3], 0.05, [(0, 1, 2)]),
    # sorted by own length; 10 and 40 together would be 50 % padding
    ([40, 10, 11], [0, 0, 0], 0.1, [(1, 2), (0,)]),
    # the old layout: everything in one forward, padded to the longest
    ([40, 10, 11], [0, 0, 0], 1.0, [(1, 2, 0)]),
    # equal own lengths: the shorter prefix first
    ([7, 7], [9, 2], 0.0, [(1, 0)]),
    ([], [], 0.05, []),
], ids=["equal", "cut-at-padding", "one-group", "prefix-tiebreak", "empty"])
def test_plan_groups(own, prefix, fraction, expected):
    assert rows_of(plan_groups(own, prefix, fraction)) == expected


def test_padding_stays_under_the_fraction_and_rows_are_covered_once():
    own = [20 + (i * 37) % 320 for i in range(40)]
    groups = plan_groups(own, [0] * len(own), 0.05)
    assert sorted(row for group in groups for row in group.rows) == list(range(len(own)))
    for group in groups:
        assert group.num_padding_tokens <= 0.05 * group.num_computed_tokens
        assert group.max_own_tokens == max(own[row] for row in group.rows)


def test_padding_is_counted():
    (group,) = plan_groups([3, 5], [0, 0], 1.0)
    assert (group.num_computed_tokens, group.num_padding_tokens) == (10, 2)


@pytest.mark.parametrize("cap, expected", [
    (None, [(0, 1, 2, 3, 4)]),
    (20, [(0, 1), (2, 3), (4,)]),   # 3 rows of 10 would compute 30 tokens
    (5, [(0,), (1,), (2,), (3,), (4,)]),  # a row longer than the cap still runs, alone
], ids=["no-cap", "cut-at-the-cap", "one-row-over-the-cap"])
def test_a_forward_holds_at_most_max_forward_tokens(cap, expected):
    assert rows_of(plan_groups([10] * 5, [50] * 5, 0.05, cap)) == expected


@pytest.mark.parametrize("device, bytes_per_value, expected", [
    ("cpu", 4, 2048), ("cpu", 2, 4096), ("cuda", 2, None)], ids=["cpu-float32", "cpu-bfloat16", "gpu"])
def test_a_cpu_forward_holds_one_size_of_activations_whatever_the_dtype(device, bytes_per_value, expected):
    assert max_forward_tokens(device, bytes_per_value) == expected


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="prefix lengths"):
        plan_groups([1, 2], [0])
