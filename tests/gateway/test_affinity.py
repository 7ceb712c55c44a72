"""gateway.affinity: the query key, the balance rule, the pure choice (tables of fresh workers,
holders and loads -> worker and outcome) and the bounded query -> workers map."""
import random
from collections import Counter

import pytest

from gateway.affinity import Balance, QueryHolders, choose, home, query_key
from gateway.workers import Worker

KEY = query_key({"query": "a long user history", "items": ["x"]})


def workers(*loads: int) -> list[Worker]:
    return [Worker(f"http://w{i}", num_reqs=load) for i, load in enumerate(loads)]


@pytest.mark.parametrize("payload, keyed", [
    ({"query": "text", "items": ["a"]}, True),
    ({"query": [1, 2, 3], "items": [[4]]}, True),
    ({"query": "text", "items": ["a"], "item_first": True}, False),  # no shared head
    ({"query": "text", "items": ["a"], "item_first": False}, True),
    ({"items": ["a"]}, False),              # not a score request: the worker answers 400
    ({"query": 7, "items": ["a"]}, False),
    ([1, 2], False),
], ids=["text", "ids", "item-first", "item-first-false", "no-query", "query-not-text", "not-object"])
def test_query_key_when(payload, keyed):
    assert (query_key(payload) is not None) is keyed


def test_query_key_is_the_query_as_sent():
    assert query_key({"query": "q", "items": ["a"]}) == query_key({"query": "q", "items": ["b", "c"],
                                                                   "apply_softmax": True})
    assert query_key({"query": "q"}) != query_key({"query": "q "})
    assert query_key({"query": "[1,2]"}) != query_key({"query": [1, 2]})  # text vs ids: two queries


@pytest.mark.parametrize("load, min_load, overloaded", [
    (64, 0, False),     # exactly abs: not beyond it
    (65, 0, True),
    (200, 135, False),  # 65 more, but not 1.5x (202.5)
    (211, 140, True),   # 71 more and past 1.5x (210)
    (300, 250, False),  # 1.2x
], ids=["at-abs", "past-abs", "abs-not-rel", "both", "rel-not-abs"])
def test_balance_needs_both_thresholds(load, min_load, overloaded):
    assert Balance(64, 1.5).is_overloaded(load, min_load) is overloaded


def test_choose_without_workers_is_none():
    assert choose(KEY, (), [], Balance(), random.Random(0)).worker is None


@pytest.mark.parametrize("loads, holders, url, outcome", [
    ((0, 0, 0), ("http://w1",), "http://w1", "hit"),
    ((10, 60, 0), ("http://w1",), "http://w1", "hit"),                 # 60 over the lightest: within 64
    ((10, 40, 0), ("http://w1", "http://w2"), "http://w2", "hit"),     # the lighter holder
    ((0, 0, 0), ("http://gone",), None, "new"),                        # holder out of rotation: home
    ((0, 200, 150), ("http://w1",), "http://w0", "spill"),             # 200 > 64 + 0 and > 1.5 * 0
], ids=["idle", "within-thresholds", "lighter-holder", "holder-not-fresh", "spill-to-lightest-pair"])
def test_choose_when(loads, holders, url, outcome):
    pool = workers(*loads)
    choice = choose(KEY, holders, pool, Balance(64, 1.5), random.Random(0))
    assert choice.outcome == outcome
    assert choice.worker.url == (url or home(KEY, pool).url)


def test_a_new_query_goes_home_unless_home_is_overloaded():
    pool = workers(0, 0, 0)
    target = home(KEY, pool)
    assert choose(KEY, (), pool, Balance(), random.Random(0)).worker is target
    target.num_reqs = 100  # now 100 over the lightest, which is at 0
    spilled = choose(KEY, (), pool, Balance(), random.Random(0))
    assert spilled.outcome == "spill" and spilled.worker is not target


def test_a_spill_never_picks_the_overloaded_worker_even_when_another_is_heavier():
    pool = workers(100, 300, 0)  # w0 holds it: overloaded against w2; w1 is heavier still
    chosen = {choose(KEY, ("http://w0",), pool, Balance(), random.Random(seed)).worker.url
              for seed in range(50)}
    # the lighter of the pair (w1, w2); power of two over all three would pick w0 against w1
    assert chosen == {"http://w2"}


def test_unkeyed_requests_go_by_power_of_two():
    pool = workers(50, 0)
    choice = choose(None, ("http://w0",), pool, Balance(), random.Random(0))
    assert (choice.worker.url, choice.outcome) == ("http://w1", "unkeyed")


def test_home_spreads_queries_and_moves_only_the_leavers_queries():
    pool = workers(0, 0, 0, 0)
    keys = [query_key({"query": f"user {i}"}) for i in range(400)]
    homes = {key: home(key, pool).url for key in keys}
    assert min(Counter(homes.values()).values()) > 60  # ~100 each, not all on one
    remaining = [w for w in pool if w.url != "http://w3"]
    moved = [key for key in keys if home(key, remaining).url != homes[key]]
    assert moved and all(homes[key] == "http://w3" for key in moved)  # rendezvous: only w3's move


def test_a_hot_query_fans_out_as_load_grows():
    # 48 concurrent requests of 20 items, one query: each choice adds its load (the gateway's
    # in-flight correction) before the next is made.
    pool, holders, rng, served = workers(0, 0, 0), QueryHolders(), random.Random(3), Counter()
    for _ in range(48):
        choice = choose(KEY, holders.get(KEY), pool, Balance(), rng)
        holders.add(KEY, choice.worker.url)
        choice.worker.num_sent += 20
        served[choice.worker.url] += 1
    assert len(served) == 3 and min(served.values()) >= 10  # with no spill: all 48 on one


def test_holders_remember_each_worker_once_in_order():
    holders = QueryHolders(10)
    for url in ("http://a", "http://b", "http://a"):
        holders.add("k", url)
    assert holders.get("k") == ("http://a", "http://b")
    assert holders.get(None) == () and holders.get("other") == ()


def test_holders_drop_the_least_recently_routed_query_beyond_the_cap():
    holders = QueryHolders(max_queries=2)
    holders.add("k1", "http://a")
    holders.add("k2", "http://a")
    holders.add("k1", "http://b")  # k1 routed again: k2 is now the oldest
    holders.add("k3", "http://a")
    assert len(holders) == 2 and holders.get("k2") == () and holders.get("k1")


def test_a_worker_that_leaves_takes_its_queries():
    holders = QueryHolders()
    holders.add("k1", "http://a")
    holders.add("k2", "http://a")
    holders.add("k2", "http://b")
    holders.forget(["http://a"])
    assert holders.get("k1") == () and holders.get("k2") == ("http://b",) and len(holders) == 1


def test_holders_refuse_a_cap_below_one():
    with pytest.raises(ValueError, match="max_queries"):
        QueryHolders(0)
