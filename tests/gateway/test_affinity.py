"""gateway.affinity: the query key, the choice over Worker records (tokens in flight, measured
rates, holders -> worker, outcome and prediction; the estimate itself: test_finish.py) and the
bounded query -> workers map."""
from collections import Counter

import pytest

from gateway.affinity import QueryHolders, choose, query_key, rank
from gateway.finish import Size
from gateway.workers import Worker

KEY = query_key({"query": "a long user history", "items": ["x"]})
FAN_OUT = Size(2000, 16 * 50)  # the fan-out request: 2,000-token query, 16 items of 50
HOT = Size(1500, 12 * 40)      # the hot query


def workers(*loads: int) -> list[Worker]:
    """Workers w0, w1, ... whose polled load is `loads` (not what cache_aware goes by)."""
    return [Worker(f"http://w{i}", num_reqs=load) for i, load in enumerate(loads)]


def in_flight(*tokens: float) -> list[Worker]:
    """Workers w0, w1, ... with `tokens` this gateway has in flight to each (what choices go by)."""
    return [Worker(f"http://w{i}", tokens_in_flight=count) for i, count in enumerate(tokens)]


def home(key: str, pool: list[Worker]) -> Worker:
    """The query's rendezvous home, by definition: the highest rank of (key, URL)."""
    return max(pool, key=lambda w: rank(key, w.url))


def burst(key: str, num_requests: int, pool: list[Worker], holders: QueryHolders, size: Size) -> None:
    """`num_requests` with query `key` routed one after another, none answered yet, with the
    Router's bookkeeping of each choice: the worker now holds the query and has its tokens in flight."""
    for _ in range(num_requests):
        choice = choose(key, holders.get(key), pool, size)
        holders.add(key, choice.worker.url)
        choice.worker.tokens_in_flight += choice.cost_tokens
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


def test_choose_without_workers_is_none():
    assert choose(KEY, (), [], HOT).worker is None


@pytest.mark.parametrize("tokens, holders, url, outcome", [
    ((0, 0, 0), ("http://w1",), "http://w1", "hit"),
    ((0, 6000, 0), ("http://w1",), "http://w1", "hit"),              # 6,480 <= 1,980 + 4,500 charge
    ((0, 7000, 100), ("http://w1",), "http://w0", "spill"),          # 7,480 > 6,480: a copy elsewhere
    ((5000, 2000, 0), ("http://w0", "http://w1"), "http://w1", "hit"),  # the holder done first
    ((0, 0, 0), ("http://gone",), None, "new"),                      # holder out of rotation: home
    ((4000, 0, 4000), (), "http://w1", "new"),                       # never seen: the earliest
], ids=["idle", "short-queue", "long-queue-spills", "earlier-holder", "holder-not-fresh",
        "new-to-the-earliest"])
def test_choose_when(tokens, holders, url, outcome):
    pool = in_flight(*tokens)
    choice = choose(KEY, holders, pool, HOT)
    assert choice.outcome == outcome
    assert choice.worker.url == (url or home(KEY, pool).url)


def test_keyed_choices_go_by_tokens_in_flight_not_the_polled_load():
    pool = workers(500, 0, 0)  # polled: w0 is busy with another gateway's traffic, say
    pool[0].tokens_in_flight = 2000
    choice = choose(KEY, ("http://w0",), pool, HOT)
    assert (choice.worker.url, choice.outcome) == ("http://w0", "hit")


def test_a_measured_slow_worker_gets_less():
    pool = in_flight(0, 0)
    pool[0].answered_tokens, pool[0].busy_s = 1000.0, 4.0   # 250 tokens/s
    pool[1].answered_tokens, pool[1].busy_s = 1000.0, 1.0   # 1,000 tokens/s
    pool[1].tokens_in_flight = 5000                           # 7 s for a new query, against 8 s
    choice = choose(KEY, (), pool, HOT)
    assert choice.worker.url == "http://w1" and choice.finish_s == pytest.approx(6980 / 1000)


def test_a_new_query_goes_home_on_an_idle_fleet_else_to_the_earliest_finish():
    pool = workers(0, 0, 0)
    target = home(KEY, pool)
    assert choose(KEY, (), pool, HOT).worker is target
    target.tokens_in_flight = 10_000
    busy_home = choose(KEY, (), pool, HOT)
    assert busy_home.outcome == "new" and busy_home.worker is not target  # computed once anyway


def test_a_few_fan_outs_spread_over_the_workers_one_worker_each():
    # Three fan-outs of 6 arriving one after another (the start of the closed loop of 18):
    # each query meets on one worker, and the three workers get one each.
    pool, holders = workers(0, 0, 0), QueryHolders()
    keys = [query_key({"query": f"user {query}"}) for query in range(3)]
    for key in keys:
        burst(key, 6, pool, holders, FAN_OUT)
    assert sorted(w.requests_in_flight for w in pool) == [6, 6, 6]
    assert all(len(holders.get(key)) == 1 for key in keys)


def test_spills_of_one_query_meet_on_one_worker():
    # w0 holds it with a long queue; w1 and w2 are alike: the query's rendezvous order decides,
    # the same for every spill of this query (a second worker computes it once, not two).
    chosen = {choose(KEY, ("http://w0",), in_flight(20_000, 0, 0), HOT).worker.url for _ in range(5)}
    assert len(chosen) == 1 and chosen != {"http://w0"}


def test_unkeyed_requests_go_by_the_earliest_finish():
    pool = in_flight(5000, 0)
    choice = choose(None, ("http://w0",), pool, HOT)
    assert (choice.worker.url, choice.outcome) == ("http://w1", "unkeyed")


def test_home_spreads_queries_and_moves_only_the_leavers_queries():
    pool = workers(0, 0, 0, 0)
    keys = [query_key({"query": f"user {i}"}) for i in range(400)]
    homes = {key: choose(key, (), pool, HOT).worker.url for key in keys}  # all idle: each query's home
    assert all(homes[key] == home(key, pool).url for key in keys)
    assert min(Counter(homes.values()).values()) > 60  # ~100 each, not all on one
    remaining = [w for w in pool if w.url != "http://w3"]
    moved = [key for key in keys if choose(key, (), remaining, HOT).worker.url != homes[key]]
    assert moved and all(homes[key] == "http://w3" for key in moved)  # rendezvous: only w3's move


def test_a_hot_query_spreads_as_its_requests_pile_up():
    # The hot query: 24 concurrent requests, none answered yet; each choice counts its
    # tokens in flight before the next is made. SGLang's count thresholds kept all 24 on one.
    pool, holders = workers(0, 0, 0), QueryHolders()
    burst(KEY, 24, pool, holders, HOT)
    counts = sorted(w.requests_in_flight for w in pool)
    assert len(holders.get(KEY)) >= 2 and counts[-1] < 24
    assert counts[-1] >= 10  # its home kept the first 10 (their queue cost less than a copy)


def test_a_fan_out_of_six_stays_on_its_worker():
    # the fan-out: 6 concurrent requests of 16 items with one 2,000-token query
    pool, holders = workers(0, 0, 0), QueryHolders()
    burst(KEY, 6, pool, holders, FAN_OUT)
    assert sorted(w.requests_in_flight for w in pool) == [0, 0, 6]


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
