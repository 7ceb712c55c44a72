"""gateway.picker.pick: a pure table of fresh workers -> the one chosen."""
import random
from collections import Counter

import pytest

from gateway.picker import pick
from gateway.workers import Worker


def workers(*loads: int) -> list[Worker]:
    return [Worker(f"http://w{i}", num_reqs=load) for i, load in enumerate(loads)]


def choices(pool: list[Worker], policy: str = "power_of_two", n: int = 600) -> Counter:
    rng = random.Random(7)
    return Counter(pick(pool, policy, rng, turn).url for turn in range(n))


def test_pick_when_no_worker_is_none():
    assert pick([], "power_of_two", random.Random(0), 0) is None


def test_pick_when_one_worker_is_that_worker():
    assert pick(workers(99), "power_of_two", random.Random(0), 0).url == "http://w0"


@pytest.mark.parametrize("loads, never", [
    ((30, 0, 0), "http://w0"),       # the busiest of three is never the lighter of any pair
    ((5, 30, 6), "http://w1"),
    ((0, 1), "http://w1"),           # two workers: the lighter always wins
], ids=["busy-first", "busy-middle", "two-workers"])
def test_power_of_two_never_picks_the_busiest(loads, never):
    assert never not in choices(workers(*loads))


def test_power_of_two_breaks_ties_at_random():
    counted = choices(workers(0, 0))
    assert set(counted) == {"http://w0", "http://w1"}  # always w0 if ties went to the first
    assert min(counted.values()) > 200


def test_power_of_two_compares_the_corrected_load():
    # w0 reported 0 but was sent 10 sequences since that answer; w1 reported 5
    pool = [Worker("http://w0", num_reqs=0, num_sent=10), Worker("http://w1", num_reqs=5)]
    assert set(choices(pool)) == {"http://w1"}


def test_round_robin_cycles_in_url_order():
    pool = workers(9, 0, 3)[::-1]
    chosen = [pick(pool, "round_robin", random.Random(0), turn).url for turn in range(6)]
    assert chosen == ["http://w0", "http://w1", "http://w2"] * 2  # loads do not matter
