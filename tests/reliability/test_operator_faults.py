"""The real operator (`python -m fleet_operator --standalone -A`, a subprocess) against an API server
that fails: 5xx bursts on the Deployment, fleet and status paths, 409 conflicts on patches, failing
and dropped watch streams; and a fleet deleted while a scale is stuck. It must converge (the
Deployment matches the fleet, status written) and never crash (alive at the end, no traceback).

Faults come from the emulator's injection API (kube_emulator/faults.py); every rule's `hits`
is checked, so a fault that never fired cannot make a test pass.
"""
from __future__ import annotations

import time

from tests.kit.waiting import wait_for
from tests.reliability.support import converged, fleet_doc

FLEETS = r"/apis/scoring\.fleet\.dev/v1alpha1/(namespaces/default/)?scoringfleets"
DEPLOYMENTS = r"/apis/apps/v1/namespaces/default/deployments"
QUIET_S = 2.0  # how long the request log is watched for a hot loop


def test_converges_through_5xx_bursts_conflicts_and_dropped_watches(operator, kube_api):
    cluster, name = operator.cluster, "faulty"
    rules = {
        "create Deployment 503": kube_api.inject("POST", DEPLOYMENTS + "$", 503, times=2),
        "read fleet 500": kube_api.inject("GET", FLEETS + f"/{name}$", 500, times=2),
        "status patch 500": kube_api.inject("PATCH", FLEETS + f"/{name}/status$", 500, times=2),
        "status patch 409": kube_api.inject("PATCH", FLEETS + f"/{name}/status$", 409, times=1),
    }
    kube_api.create(fleet_doc(name, replicas=2))  # a POST: kubectl apply would GET it first
    wait_for(lambda: converged(cluster, name, 2), "convergence at 2 replicas", timeout_s=20)
    kube_api.drop_watches()
    rules.update({
        "watch fleets 500": kube_api.inject("GET", FLEETS + r"\?.*watch=true", 500, times=2),
        "patch Deployment 409": kube_api.inject("PATCH", DEPLOYMENTS + f"/{name}$", 409, times=2),
        "patch Deployment 503": kube_api.inject("PATCH", DEPLOYMENTS + f"/{name}$", 503, times=1),
    })
    dropped_at = time.monotonic()
    kube_api.drop_watches()
    cluster.kubectl("scale", "sf", name, "--replicas=3")
    wait_for(lambda: converged(cluster, name, 3), "convergence at 3 replicas", timeout_s=20)
    print(f"\nfault hits: { {k: r.hits for k, r in rules.items()} }")
    assert all(rule.hits == rule.times for rule in rules.values()), \
        {k: (r.hits, r.times) for k, r in rules.items()}
    # The cut watches were opened again (the fleets' one after its two 500s).
    for watched in ("scoringfleets", "deployments"):
        assert kube_api.requests(dropped_at, "GET", rf"/{watched}\?.*watch=true"), watched
    operator.assert_alive_without_traceback()


def test_a_fleet_deleted_mid_scale_is_collected_and_the_operator_goes_quiet(operator, kube_api):
    cluster, name = operator.cluster, "doomed"
    cluster.apply(fleet_doc(name, replicas=1))
    wait_for(lambda: converged(cluster, name, 1), "convergence at 1 replica", timeout_s=15)
    # Every Deployment patch fails from now on: the scale to 4 stays in flight, retried.
    stuck = kube_api.inject("PATCH", DEPLOYMENTS + f"/{name}$", 503, times=None)
    cluster.kubectl("scale", "sf", name, "--replicas=4")
    wait_for(lambda: stuck.hits >= 1, "the operator trying to scale")
    cluster.kubectl("delete", "sf", name, "--wait=false")
    wait_for(lambda: cluster.fleet(name) is None, "the fleet gone (finalizer released)")
    wait_for(lambda: cluster.deployment(name) is None, "its Deployment collected")
    # No hot loop: once it is gone, the operator stops touching it.
    time.sleep(0.5)  # let a request already in flight land
    since = time.monotonic()
    time.sleep(QUIET_S)
    touching = kube_api.requests(since, path_regex=name)
    print(f"\nrequests about {name} in the {QUIET_S} s after it was gone: {len(touching)}; "
          f"stuck patch tried {stuck.hits} times")
    assert touching == [], touching
    operator.assert_alive_without_traceback()
