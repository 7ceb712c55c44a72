"""A fleet's deletion does not wait on a running timer (issue 32): kopf keeps a fleet's finalizer
until its timers have stopped, and a timer mid-handler (an autoscale tick scraping pods that never
answer) is looked at again only every settings.background.cancellation_polling, 60 s by kopf's
default. The operator polls every second, so a deletion takes at most the tick (its scrape times
out within 2 s) plus a second.
"""
from __future__ import annotations

import time

import pytest

from fleet_operator.__main__ import CANCELLATION_POLLING_S
from fleet_operator.tick import MAX_SCRAPE_TIMEOUT_S
from tests.fleet_operator.loopback import free_port, pod_ip
from tests.kit.waiting import wait_for
from tests.reliability.support import MetricsPod, fleet_doc

pytestmark = pytest.mark.slow

# the running tick's scrape, kopf's next look, and the API round trips and watch events around them
DELETION_BOUND_S = MAX_SCRAPE_TIMEOUT_S + CANCELLATION_POLLING_S + 2.0


def test_deleting_a_fleet_mid_tick_waits_for_that_tick_only(operator, kube_api):
    cluster = operator.cluster
    port = free_port([pod_ip(0)])
    pod = MetricsPod(pod_ip(0), port, None)  # /metrics hangs: every tick lasts its scrape timeout
    pod.thread.start()
    try:
        doc = fleet_doc("hang", replicas=1)
        doc["spec"].update(server={"port": port}, autoscaling={
            "enabled": True, "mode": "native", "minReplicas": 1, "maxReplicas": 2,
            "scrapeIntervalSeconds": 4})  # the scrape timeout: min(2 s, interval / 2)
        cluster.apply(doc)
        kube_api.add_pod("default", "hang-0", {"scoring.fleet.dev/fleet": "hang"}, pod_ip(0), port)
        wait_for(lambda: ((cluster.fleet("hang") or {}).get("metadata") or {}).get("finalizers"),
                 "kopf's finalizer on the fleet")
        pod.asked.clear()
        wait_for(pod.asked.is_set, "a tick scraping the hanging pod", timeout_s=15)
        deleting = time.monotonic()
        cluster.kubectl("delete", "sf", "hang", "--wait=false")
        wait_for(lambda: cluster.fleet("hang") is None, "the fleet gone", timeout_s=30)
        took_s = time.monotonic() - deleting
    finally:
        pod.stop()
    print(f"\ndeleted mid-tick in {took_s:.1f} s (bound {DELETION_BOUND_S:g} s)")
    assert took_s < DELETION_BOUND_S
    operator.assert_alive_without_traceback()
