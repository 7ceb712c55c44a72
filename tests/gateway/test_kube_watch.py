"""PodWatch's retry pacing: an expired watch (410) lists again at once, but 410s in a row wait
like failures, so an expiry right after every list cannot storm the API server."""
from __future__ import annotations

import asyncio

import pytest
from kubernetes.client.exceptions import ApiException

from gateway import kube_watch
from gateway.kube_watch import RETRY_DELAY_S, PodWatch, failure_delay_s


@pytest.mark.parametrize(("is_gone", "was_gone", "failed_since_list", "expected_s"), [
    (True, False, False, 0.0),            # one expired watch: list again at once
    (True, True, False, RETRY_DELAY_S),   # a second 410 in a row: wait
    (False, False, False, 0.0),           # a cut watch after a good list: at once
    (False, False, True, RETRY_DELAY_S),  # failures with no good list between: wait
])
def test_failure_delay(is_gone, was_gone, failed_since_list, expected_s):
    assert failure_delay_s(is_gone, was_gone, failed_since_list) == expected_s


class FakeApi:
    def close(self) -> None:
        pass


def test_consecutive_410s_wait_after_the_first(monkeypatch):
    monkeypatch.setattr(kube_watch, "api_client", FakeApi)
    watch = PodWatch("fleet", "ns", "app", lambda urls: None, asyncio.new_event_loop())
    waits: list[float] = []
    calls = iter([ApiException(status=410), ApiException(status=410), ApiException(status=410),
                  None, ApiException(status=410)])

    def list_and_watch(api, core):
        outcome = next(calls, "stop")
        if outcome == "stop":
            watch.stop()
        elif outcome is not None:
            raise outcome
    monkeypatch.setattr(watch, "_list_and_watch", list_and_watch)
    monkeypatch.setattr(watch._stopping, "wait", waits.append)
    watch._run()
    watch.loop.close()
    # a watch that ran its course between resets the count: the last 410 lists at once again
    assert waits == [0.0, RETRY_DELAY_S, RETRY_DELAY_S, 0.0]
