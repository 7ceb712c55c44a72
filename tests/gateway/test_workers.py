"""gateway.workers: the registry's bookkeeping (freshness, in-flight correction, rotation)."""
import pytest

from gateway.workers import Worker, WorkerRegistry

A, B, C = "http://a", "http://b", "http://c"


def registry(*urls: str, stale_after_s: float = 0.5) -> WorkerRegistry:
    reg = WorkerRegistry(stale_after_s)
    reg.set_urls(urls)
    return reg


@pytest.mark.parametrize("worker, now, fresh", [
    (Worker(A), 0.0, False),                                   # never answered
    (Worker(A, answered_at=10.0), 10.4, True),
    (Worker(A, answered_at=10.0), 10.6, False),                # older than stale_after_s
    (Worker(A, answered_at=10.0, failed=True), 10.1, False),   # last poll or connection failed
    (Worker(A, answered_at=10.0, loading=True), 10.1, False),  # answers, but its model loads
], ids=["never-answered", "recent", "stale", "failed", "loading"])
def test_is_fresh(worker, now, fresh):
    assert worker.is_fresh(now, stale_after_s=0.5) is fresh


def test_sent_sequences_count_until_a_poll_sent_after_them_answers():
    reg = registry(A)
    mark = reg.poll_started(A)            # poll 1 goes out
    reg.record_sent(A, 30)                # 30 sequences sent while it is on the wire
    reg.record_answer(A, num_reqs=2, mark=mark, now=1.0)
    assert reg.get(A).load == 32          # poll 1 cannot have seen the 30 (2 if it had reset them)
    mark = reg.poll_started(A)            # poll 2 goes out after them: its answer includes them
    reg.record_answer(A, num_reqs=25, mark=mark, now=1.05)
    assert reg.get(A).load == 25


def test_requests_are_in_flight_from_sent_to_done_and_a_returning_worker_starts_at_zero():
    reg = registry(A)
    reg.record_sent(A, 20)
    reg.record_sent(A, 5)
    reg.record_done(A)
    assert reg.get(A).requests_in_flight == 1
    reg.set_urls([])
    reg.set_urls([A])                     # left and came back: a new record, the old request
    reg.record_done(A)                    # ends after it and does not take it below 0
    assert reg.get(A).requests_in_flight == 0


def test_tokens_are_in_flight_until_done_and_answers_teach_the_rate_by_busy_time():
    reg = registry(A)
    assert reg.get(A).rate is None                      # never answered: the fleet's median
    reg.record_sent(A, 16, tokens=2800, now=10.0)        # idle until now: busy from 10.0
    reg.record_sent(A, 16, tokens=800, now=10.5)
    assert reg.get(A).tokens_in_flight == 3600
    reg.record_done(A, tokens=2800, answered_at=11.4)    # 2,800 tokens in 1.4 s busy
    assert reg.get(A).rate == pytest.approx(2000)
    # The second waited behind the first: its 0.9 s since the last answer are its busy time, not
    # its 1.3 s latency. Decayed: (0.9 x 2,800 + 800) / (0.9 x 1.4 + 0.9)
    reg.record_done(A, tokens=800, answered_at=12.3)
    assert reg.get(A).rate == pytest.approx((0.9 * 2800 + 800) / (0.9 * 1.4 + 0.9))
    assert reg.get(A).tokens_in_flight == 0
    reg.record_sent(A, 1, tokens=100, now=50.0)          # idle 12.3-50: not busy time
    reg.record_done(A, tokens=100)                        # failed or timed out: no lesson
    assert reg.get(A).rate == pytest.approx((0.9 * 2800 + 800) / (0.9 * 1.4 + 0.9))
    assert (reg.get(A).tokens_in_flight, reg.get(A).requests_in_flight) == (0, 0)


def test_a_failure_takes_a_worker_out_until_a_poll_answers():
    reg = registry(A, B)
    for url in (A, B):
        reg.record_answer(url, 0, reg.poll_started(url), now=1.0)
    reg.record_failure(A)
    assert [w.url for w in reg.fresh(1.1)] == [B]
    reg.record_answer(A, 0, reg.poll_started(A), now=1.2)
    assert sorted(w.url for w in reg.fresh(1.3)) == [A, B]


def test_set_urls_keeps_state_of_kept_workers_and_counts_gone():
    reg = registry(A, B)
    reg.record_answer(A, 7, reg.poll_started(A), now=1.0)
    assert reg.set_urls([A, C]) == ([C], [B])
    assert reg.get(A).num_reqs == 7 and reg.get(B) is None
    assert reg.counts_by_state(1.1) == {"joined": 1, "ready": 1, "draining": 0, "stale": 0, "unauthorized": 0,
                                      "loading": 0, "gone": 1}
    reg.set_urls([A, B, C])               # B came back: no longer gone
    assert reg.counts_by_state(1.1) == {"joined": 2, "ready": 1, "draining": 0, "stale": 0, "unauthorized": 0,
                                      "loading": 0, "gone": 0}


def test_reports_about_unknown_workers_are_ignored():
    reg = registry(A)
    reg.record_answer(B, 3, 0, now=1.0)
    reg.record_sent(B, 3)
    reg.record_done(B)
    reg.record_failure(B)
    assert reg.loads() == {A: 0}


@pytest.mark.parametrize("key_accepted, key_required, fresh", [
    (None, False, True),     # no key at the gateway: nothing to check
    (None, True, False),     # a key, not yet checked: not chosen until the probe says yes
    (True, True, True),
    (False, True, False),    # refuses the gateway's key
], ids=["no-key", "unchecked", "accepted", "refused"])
def test_is_fresh_with_a_key(key_accepted, key_required, fresh):
    worker = Worker(A, answered_at=10.0, key_accepted=key_accepted)
    assert worker.is_fresh(10.1, stale_after_s=0.5, key_required=key_required) is fresh


def test_a_worker_refusing_the_key_counts_as_unauthorized_until_it_accepts_it():
    reg = WorkerRegistry(0.5, key_required=True)
    reg.set_urls([A, B])
    for url in (A, B):
        reg.record_answer(url, 0, reg.poll_started(url), now=1.0)
    assert reg.record_key(A, True) and reg.record_key(B, False)
    assert not reg.record_key(B, False)  # no change: on_change (the transition log) is not told
    assert [w.url for w in reg.fresh(1.1)] == [A]
    assert reg.counts_by_state(1.1) == {"joined": 0, "ready": 1, "draining": 0, "stale": 0, "unauthorized": 1,
                                      "loading": 0, "gone": 0}
    assert reg.record_key(B, True)
    assert reg.counts_by_state(1.1) == {"joined": 0, "ready": 2, "draining": 0, "stale": 0, "unauthorized": 0,
                                      "loading": 0, "gone": 0}


def test_a_loading_worker_gets_no_work_until_an_answer_says_it_is_loaded():
    reg = registry(A, B)
    reg.record_answer(A, 0, reg.poll_started(A), now=1.0, loading=True)  # a new or restarted server
    reg.record_answer(B, 5, reg.poll_started(B), now=1.0)
    assert [w.url for w in reg.fresh(1.1)] == [B]  # B, although busier
    assert reg.counts_by_state(1.1) == {"joined": 0, "ready": 1, "draining": 0, "stale": 0, "unauthorized": 0,
                                      "loading": 1, "gone": 0}
    reg.record_answer(A, 0, reg.poll_started(A), now=1.2)
    assert sorted(w.url for w in reg.fresh(1.3)) == [A, B]


def test_a_worker_that_starts_loading_again_is_a_new_process_whose_key_is_checked_anew():
    reg = WorkerRegistry(0.5, key_required=True)
    reg.set_urls([A])
    reg.record_answer(A, 3, reg.poll_started(A), now=1.0)
    reg.record_key(A, True)
    assert [w.url for w in reg.fresh(1.1)] == [A]
    reg.record_answer(A, 0, reg.poll_started(A), now=1.2, loading=True)  # restarted in place
    assert reg.get(A).key_accepted is None and reg.fresh(1.3) == []
    reg.record_answer(A, 0, reg.poll_started(A), now=1.4)  # loaded, key not yet checked
    assert reg.fresh(1.5) == []
    reg.record_key(A, True)
    assert [w.url for w in reg.fresh(1.5)] == [A]


def test_a_restarted_worker_is_no_longer_draining():
    # A loading server answers 503 + Connection: close, which a routed request reads as draining;
    # the new process's first answer ends the old one's drain (record_failure would have too).
    reg = registry(A)
    reg.record_answer(A, 0, reg.poll_started(A), now=1.0)
    reg.record_draining(A)
    reg.record_answer(A, 0, reg.poll_started(A), now=1.2, loading=True)  # restarted in place
    reg.record_answer(A, 0, reg.poll_started(A), now=1.4)  # loaded
    assert not reg.get(A).draining and reg.counts_by_state(1.5)["ready"] == 1



def answers(reg: WorkerRegistry, url: str, now: float, loading: bool = False) -> None:
    reg.record_answer(url, 0, reg.poll_started(url), now=now, loading=loading)


@pytest.mark.parametrize("events, new_process", [
    (["answer"], False),                                # a new worker: nothing to forget
    (["loading", "answer"], False),                     # a new worker that loads, then serves
    (["fail", "answer"], False),                        # not up at first: it never answered before
    (["answer", "answer"], False),
    (["answer", "loading"], True),                      # restarted in place: loading again
    (["answer", "loading", "loading", "answer"], True),  # told once, as it starts loading
    (["answer", "fail", "answer"], True),               # down, then up: SGLang's never says loading
    (["answer", "fail", "loading", "answer"], True),
    (["answer", "draining", "answer"], False),          # draining is still the same process
], ids=["first", "first-loading", "first-failed", "serving", "loading-again", "loading-once",
        "back-after-failing", "back-loading", "draining"])
def test_the_registry_tells_on_new_process_when(events, new_process):
    told: list[str] = []
    reg = WorkerRegistry(0.5, on_new_process=told.append)
    reg.set_urls([A, B])
    answers(reg, B, now=0.5)
    for now, event in enumerate(events, start=1):
        if event == "fail":
            reg.record_failure(A, "refused")
        elif event == "draining":
            reg.record_draining(A)
        else:
            answers(reg, A, now=float(now), loading=event == "loading")
    answers(reg, B, now=9.0)
    assert told == ([A] if new_process else [])
