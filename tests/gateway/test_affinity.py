"""gateway.affinity: the query key, the balance rule, the pure choice (tables of fresh workers,
holders and loads -> worker and outcome) and the bounded query -> workers map."""
import random
from collections import Counter

import pytest

from gateway.affinity import Balance, QueryHolders, choose, fewest, query_key, rank
from gateway.workers import Worker

KEY = query_key({"query": "a long user history", "items": ["x"]})


def workers(*loads: int) -> list[Worker]:
    """Workers whose polled load is `loads` (what unkeyed requests go by)."""
    return [Worker(f"http://w{i}", num_reqs=load) for i, load in enumerate(loads)]


def in_flight(*counts: int) -> list[Worker]:
    """Workers w0, w1, ... with `counts` requests this gateway has in flight to each (what keyed
    requests go by)."""
    return [Worker(f"http://w{i}", requests_in_flight=count) for i, count in enumerate(counts)]


def home(key: str, pool: list[Worker]) -> Worker:
    """The query's rendezvous home, by definition: the highest rank of (key, URL)."""
    return max(pool, key=lambda w: rank(key, w.url))


def burst(key: str, num_requests: int, pool: list[Worker], holders: QueryHolders,
          rng: random.Random) -> None:
    """`num_requests` with query `key` routed one after another, none answered yet, with the
    Router's bookkeeping of each choice: the worker now holds the query and has it in flight."""
    for _ in range(num_requests):
        choice = choose(key, holders.get(key), pool, Balance(), rng)
        holders.add(key, choice.worker.url)
        choice.worker.requests_in_flight += 1


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
    (32, 0, False),   # exactly abs: not beyond it
    (33, 0, True),
    (100, 67, False),  # 33 more, but not 1.5x (100.5)
    (110, 70, True),   # 40 more and past 1.5x (105)
    (200, 160, False),  # 1.25x
], ids=["at-abs", "past-abs", "abs-not-rel", "both", "rel-not-abs"])
def test_balance_needs_both_thresholds(load, min_load, overloaded):
    assert Balance(32, 1.5).is_overloaded(load, min_load) is overloaded


def test_choose_without_workers_is_none():
    assert choose(KEY, (), [], Balance(), random.Random(0)).worker is None


@pytest.mark.parametrize("counts, holders, url, outcome", [
    ((0, 0, 0), ("http://w1",), "http://w1", "hit"),
    ((5, 32, 0), ("http://w1",), "http://w1", "hit"),                 # 32 over the fewest: within 32
    ((5, 20, 0), ("http://w1", "http://w2"), "http://w2", "hit"),     # the holder with fewer
    ((0, 0, 0), ("http://gone",), None, "new"),                       # holder out of rotation: home
    ((4, 0, 4), (), "http://w1", "new"),                              # never seen: the fewest
    ((3, 40, 1), ("http://w1",), "http://w2", "spill"),               # 40 > 32 + 1 and > 1.5: fewest
], ids=["idle", "within-thresholds", "fewer-holder", "holder-not-fresh", "new-to-the-fewest",
        "spill-to-the-fewest"])
def test_choose_when(counts, holders, url, outcome):
    pool = in_flight(*counts)
    choice = choose(KEY, holders, pool, Balance(32, 1.5), random.Random(0))
    assert choice.outcome == outcome
    assert choice.worker.url == (url or home(KEY, pool).url)


def test_keyed_choices_go_by_requests_in_flight_not_the_polled_load():
    pool = workers(500, 0, 0)  # polled: w0 is busy with another gateway's traffic, say
    pool[0].requests_in_flight = 2
    choice = choose(KEY, ("http://w0",), pool, Balance(), random.Random(0))
    assert (choice.worker.url, choice.outcome) == ("http://w0", "hit")


def test_a_new_query_goes_home_on_an_even_fleet_else_to_the_worker_with_the_fewest():
    pool = workers(0, 0, 0)
    target = home(KEY, pool)
    assert choose(KEY, (), pool, Balance(), random.Random(0)).worker is target
    target.requests_in_flight = 10
    busy_home = choose(KEY, (), pool, Balance(), random.Random(0))
    assert busy_home.outcome == "new" and busy_home.worker is not target  # computed once anyway


def test_a_few_new_queries_spread_over_the_workers():
    # Three fan-outs of 10 arriving one after another (the bench's first 30 requests): rendezvous
    # alone sent two, or all three, to one worker (half the fleet idle while it worked them off).
    pool, holders = workers(0, 0, 0), QueryHolders()
    for query in range(3):
        burst(query_key({"query": f"user {query}"}), 10, pool, holders, random.Random(0))
    assert sorted(w.requests_in_flight for w in pool) == [10, 10, 10]


def test_spills_of_one_query_meet_on_one_worker():
    # w0 holds it and is overloaded; w1 and w2 have as few: the query's rendezvous order decides,
    # the same for every spill of this query (a second worker computes it once, not two).
    pool = in_flight(40, 0, 0)
    chosen = {choose(KEY, ("http://w0",), pool, Balance(), random.Random(seed)).worker.url
              for seed in range(20)}
    assert len(chosen) == 1 and chosen != {"http://w0"}


def test_unkeyed_requests_go_by_power_of_two():
    pool = workers(50, 0)
    choice = choose(None, ("http://w0",), pool, Balance(), random.Random(0))
    assert (choice.worker.url, choice.outcome) == ("http://w1", "unkeyed")


def test_home_spreads_queries_and_moves_only_the_leavers_queries():
    pool = workers(0, 0, 0, 0)
    keys = [query_key({"query": f"user {i}"}) for i in range(400)]
    homes = {key: fewest(key, pool).url for key in keys}  # all idle: each query's home
    assert all(homes[key] == home(key, pool).url for key in keys)
    assert min(Counter(homes.values()).values()) > 60  # ~100 each, not all on one
    remaining = [w for w in pool if w.url != "http://w3"]
    moved = [key for key in keys if fewest(key, remaining).url != homes[key]]
    assert moved and all(homes[key] == "http://w3" for key in moved)  # rendezvous: only w3's move


def test_a_hot_query_spreads_as_its_requests_pile_up():
    # 48 concurrent requests with one query (the hot query), none answered yet: each
    # choice counts its request in flight before the next is made.
    pool, holders = workers(0, 0, 0), QueryHolders()
    burst(KEY, 48, pool, holders, random.Random(3))
    # 33 on its home (32 over the fewest, then spill), the other 15 on one second worker: SGLang's
    # 64 would have kept all 48 on one
    assert sorted(w.requests_in_flight for w in pool) == [0, 15, 33] and len(holders.get(KEY)) == 2


def test_a_fan_out_of_ten_stays_on_its_worker():
    # the fan-out: 10 concurrent requests with one query, other workers idle
    pool, holders = workers(0, 0, 0), QueryHolders()
    burst(KEY, 10, pool, holders, random.Random(0))
    assert sorted(w.requests_in_flight for w in pool) == [0, 0, 10]


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
