"""gateway.policies: each policy a table of fresh workers -> the one chosen, and the factory."""
import random
from collections import Counter

import pytest

from gateway.config import GatewayConfig
from gateway.finish import Size
from gateway.policies import CacheAware, PowerOfTwo, RoundRobin, make_policy, power_of_two, round_robin
from gateway.workers import Worker


def workers(*loads: int) -> list[Worker]:
    return [Worker(f"http://w{i}", num_reqs=load) for i, load in enumerate(loads)]


def choices(pool: list[Worker], n: int = 600) -> Counter:
    rng = random.Random(7)
    return Counter(power_of_two(pool, rng).url for _ in range(n))


def test_pick_when_no_worker_is_none():
    assert power_of_two([], random.Random(0)) is None and round_robin([], 0) is None


def test_pick_when_one_worker_is_that_worker():
    assert power_of_two(workers(99), random.Random(0)).url == "http://w0"


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
    chosen = [round_robin(pool, turn).url for turn in range(6)]
    assert chosen == ["http://w0", "http://w1", "http://w2"] * 2  # loads do not matter


def test_round_robin_policy_keeps_its_turn_on_a_retry():
    policy, pool, size = RoundRobin(), workers(0, 0, 0), Size(10, 10)
    first = policy.choose(pool, None, size, is_retry=False).worker.url
    retried = policy.choose([w for w in pool if w.url != first], None, size, is_retry=True).worker.url
    assert (first, retried) == ("http://w0", "http://w2")  # the turn (1) among the two left
    assert policy.choose(pool, None, size, is_retry=False).worker.url == "http://w1"  # the turn moved once


def test_a_plain_policy_charges_the_request_its_tokens():
    choice = PowerOfTwo(random.Random(0)).choose(workers(0), "k", Size(30, 20), is_retry=False)
    assert choice.outcome == "" and choice.cost_tokens == Size(30, 20).cost(False) > 0


@pytest.mark.parametrize("policy, kind", [
    ("power_of_two", PowerOfTwo), ("round_robin", RoundRobin), ("cache_aware", CacheAware),
], ids=["power_of_two", "round_robin", "cache_aware"])
def test_make_policy_builds_each_policy_afresh(policy, kind):
    config = GatewayConfig(worker_urls=("http://w0",), policy=policy)
    first, second = make_policy(config), make_policy(config)
    assert isinstance(first, kind) and first.name == policy and first is not second
