"""gateway.finish: the pure expected-finish estimate (tables of workers' tokens in flight, rates and
who holds the query -> the chosen worker, its predicted finish and outcome), and the rate rule."""
import pytest

from gateway.finish import (
    DEFAULT_RATE_TOKENS_PER_S,
    Option,
    Size,
    decayed,
    earliest,
    median_rate,
    rate_of,
)

HOT = Size(query_tokens=1500, item_tokens=12 * 40)  # the hot query: 12 items of 40 tokens


def fleet(*workers: tuple[float, float | None, bool]) -> list[Option]:
    """Options w0, w1, ... from (tokens in flight, rate, holds the query); w0 ranks first on ties."""
    return [Option(f"w{i}", backlog, rate, holds, order=-i) for i, (backlog, rate, holds) in enumerate(workers)]


@pytest.mark.parametrize("workers, charge, url, outcome", [
    # the owner's queue is short: queueing behind it (2,000 + 480) beats computing the query again
    # elsewhere (1,500 + 480, plus the charge of 3 x 1,500)
    (((2000, 1000, True), (0, 1000, False), (0, 1000, False)), 3.0, "w0", "hit"),
    # long: 9,000 in flight there; elsewhere 1,980 + 4,500 charge = 6,480 < 9,480
    (((9000, 1000, True), (0, 1000, False), (0, 1000, False)), 3.0, "w1", "spill"),
    # without the charge the short queue spills too: 2,480 > 1,980 (a burst would spread)
    (((2000, 1000, True), (0, 1000, False), (0, 1000, False)), 0.0, "w1", "spill"),
    # the spill goes to the lighter non-holder
    (((9000, 1000, True), (3000, 1000, False), (0, 1000, False)), 3.0, "w2", "spill"),
    # of two holders, the one that finishes first
    (((4000, 1000, True), (1000, 1000, True), (0, 1000, False)), 3.0, "w1", "hit"),
    # nobody holds it: computed once anyway, the earliest finish
    (((500, 1000, False), (100, 1000, False), (300, 1000, False)), 3.0, "w1", "new"),
    # idle and alike: the highest order (the query's rendezvous home)
    (((0, 1000, False), (0, 1000, False), (0, 1000, False)), 3.0, "w0", "new"),
    # equal finish between a holder and a non-holder: the holder (no copy)
    (((0, 1000, True), (0, 1000, False)), 0.0, "w0", "hit"),
], ids=["short-queue-stays-home", "long-queue-spills", "no-charge-spills-early", "spill-to-lightest",
        "faster-holder", "new-to-earliest", "idle-goes-home", "tie-prefers-holder"])
def test_earliest_when(workers, charge, url, outcome):
    estimate = earliest(fleet(*workers), HOT, charge)
    assert (estimate.url, estimate.outcome) == (url, outcome)


def test_the_prediction_is_the_backlog_and_the_requests_own_tokens_over_the_rate():
    estimate = earliest(fleet((2000, 500, True), (0, 500, False)), HOT)
    assert estimate.cost_tokens == 480  # held there: the items alone
    assert estimate.finish_s == pytest.approx((2000 + 480) / 500)
    new = earliest(fleet((0, 500, False)), HOT)
    assert new.cost_tokens == 1980 and new.finish_s == pytest.approx(1980 / 500)


def test_a_slow_worker_gets_less():
    # Same backlog of 4,000: w1 does 500 tokens/s, w0 2,000. A new query of 1,980 finishes on
    # w0 in 3 s, on w1 in 12 s; w1 gets it only once w0's backlog is 4x as large plus.
    assert earliest(fleet((4000, 2000, False), (4000, 500, False)), HOT).url == "w0"
    assert earliest(fleet((25000, 2000, False), (4000, 500, False)), HOT).url == "w1"


def test_a_new_worker_starts_at_the_fleets_median_rate():
    # w2 never answered: assumed the median of 400, 1,000 and 1,600 -> 1,000 tokens/s
    assert median_rate([400.0, 1000.0, None, 1600.0]) == 1000.0
    options = fleet((3000, 400, False), (3000, 1600, False), (1000, None, False), (3000, 1000, False))
    estimate = earliest(options, HOT)
    assert estimate.url == "w2" and estimate.finish_s == pytest.approx((1000 + 1980) / 1000)


def test_before_any_answer_every_worker_is_assumed_the_default_rate():
    assert median_rate([None, None]) == DEFAULT_RATE_TOKENS_PER_S
    estimate = earliest(fleet((100, None, False), (0, None, False)), HOT)
    assert estimate.url == "w1" and estimate.finish_s == pytest.approx(1980 / DEFAULT_RATE_TOKENS_PER_S)


def test_an_unkeyed_request_goes_by_finish_alone():
    # No shared query: the holder flag means nothing, there is no charge and no hit.
    estimate = earliest(fleet((1000, 1000, True), (0, 1000, False)), HOT, keyed=False)
    assert (estimate.url, estimate.outcome, estimate.cost_tokens) == ("w1", "unkeyed", 1980)


def test_no_options_no_estimate():
    assert earliest([], HOT) is None


def test_burst_of_one_query_stays_home_until_its_queue_costs_more_than_a_copy():
    # The hot query: 24 requests of 12 x 40 items, 1,500-token query, sent at once on an
    # idle fleet of three alike workers. The first 10 stay home (1,980 + 9 x 480 = 6,300 in
    # flight); then a copy elsewhere finishes sooner even with its charge, and the rest share.
    backlog, holders = [0.0, 0.0, 0.0], set()
    for _ in range(24):
        options = [Option(f"w{i}", backlog[i], 1000.0, f"w{i}" in holders, order=-i) for i in range(3)]
        estimate = earliest(options, HOT)
        holders.add(estimate.url)
        backlog[int(estimate.url[1:])] += estimate.cost_tokens
    assert len(holders) >= 2
    assert max(backlog) < 1980 + 23 * 480  # not all on one: the single-worker figure
    assert sum(backlog) <= 24 * 480 + 3 * 1500  # the query computed at most once per worker


def test_a_fan_out_burst_keeps_each_query_on_one_worker():
    # The fan-out start: three 2,000-token queries x six requests of 16 x 50 items, in
    # order, at once (a closed loop of 18): each query on a worker of its own, computed once.
    size, backlog, holders = Size(2000, 800), [0.0, 0.0, 0.0], {}
    for query in ("q1", "q2", "q3"):
        for _ in range(6):
            held = holders.setdefault(query, set())
            options = [Option(f"w{i}", backlog[i], 1000.0, f"w{i}" in held, order=-i) for i in range(3)]
            estimate = earliest(options, size)
            held.add(estimate.url)
            backlog[int(estimate.url[1:])] += estimate.cost_tokens
    assert all(len(held) == 1 for held in holders.values())
    assert backlog == [6800.0, 6800.0, 6800.0]


@pytest.mark.parametrize("samples, rate", [
    ([], None),
    ([(1000, 1.0)], 1000.0),
    # three requests of one batch answered after 1 s busy (the second and third at once): 3,000
    # tokens/s in truth; the decay weighs the later ones less: 2,710 / 0.81 (+12 %)
    ([(1000, 1.0), (1000, 0.0), (1000, 0.0)], pytest.approx(2710 / 0.81)),
], ids=["none", "one", "a-batch"])
def test_rate_is_decayed_tokens_over_decayed_busy_seconds(samples, rate):
    tokens = busy_s = 0.0
    for sample_tokens, sample_s in samples:
        tokens, busy_s = decayed(tokens, sample_tokens), decayed(busy_s, sample_s)
    assert rate_of(tokens, busy_s) == rate
