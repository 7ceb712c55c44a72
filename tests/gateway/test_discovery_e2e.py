"""`python -m gateway --fleet f` against the Kubernetes API emulator: pods (loopback addresses,
real servers) join the rotation when ready and leave it at once on becoming not ready or
terminating; a request waiting for a worker is answered once a pod is ready; API errors, an
expired watch and a cut watch are followed by a fresh list and watch."""
import threading

import httpx

from fleet_operator.names import FLEET_LABEL
from tests.gateway.support import gateway_process, sample, score_body
from tests.kit.runners import FakeRunner
from tests.kit.servers import serving
from tests.kit.waiting import wait_for

G = "scoringfleet_gateway"
NS = "default"


def set_ready(kube_api, name: str, ready: bool) -> None:
    truth = "True" if ready else "False"
    status = {"conditions": [{"type": kind, "status": truth} for kind in ("ContainersReady", "Ready")]}
    code, body = kube_api.request("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status",
                                  {"status": status}, content_type="application/merge-patch+json")
    assert code == 200, body


def terminate(kube_api, name: str) -> None:
    """DELETE a pod held by a finalizer: it stays, with a deletionTimestamp, like a draining pod."""
    code, body = kube_api.request("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}",
                                  {"metadata": {"finalizers": ["test.scoring.fleet.dev/hold"]}},
                                  content_type="application/merge-patch+json")
    assert code == 200, body
    code, body = kube_api.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}")
    assert code in (200, 202) and body["metadata"]["deletionTimestamp"], body


def add_pod(kube_api, name: str, url: str, fleet: str = "f", ready: bool = True) -> None:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    kube_api.add_pod(NS, name, {FLEET_LABEL: fleet}, pod_ip=host, port=int(port), ready=ready)


def ready_workers(gateway: str) -> float:
    return sample(gateway, f"{G}_workers", state="ready")


def test_gateway_follows_the_fleets_pods(kube_api, tmp_path):
    with serving(FakeRunner(), host="127.0.0.2") as (first, _), \
            serving(FakeRunner(), host="127.0.0.3") as (second, _), \
            serving(FakeRunner(), host="127.0.0.4") as (third, _), \
            gateway_process("--fleet", "f", "--namespace", NS, "--queue-timeout", "10",
                            log_path=tmp_path / "gateway.log", env=kube_api.env) as gateway:
        assert httpx.get(f"{gateway}/ready").status_code == 503  # no worker known yet
        # an API outage, then an expired watch (410 Gone): the gateway lists and watches again
        outage = kube_api.inject("GET", r"/pods\?", 503, times=2)
        expired = kube_api.inject("GET", r"/pods\?.*watch=", 410, times=1)
        add_pod(kube_api, "other-fleet", third, fleet="g")
        add_pod(kube_api, "p0", first)
        wait_for(lambda: ready_workers(gateway) == 1)
        assert outage.hits == 2 and expired.hits == 1
        assert httpx.post(f"{gateway}/v1/score", json=score_body()).status_code == 200
        assert sample(gateway, f"{G}_routed_total", worker=first) == 1
        assert sample(gateway, f"{G}_worker_load", worker=third) == 0  # not in fleet f

        add_pod(kube_api, "p1", second, ready=False)
        set_ready(kube_api, "p1", True)
        wait_for(lambda: ready_workers(gateway) == 2)

        set_ready(kube_api, "p0", False)  # leaves on the watch event: its server still answers polls
        wait_for(lambda: sample(gateway, f"{G}_workers", state="gone") == 1, timeout_s=5)
        for _ in range(6):
            assert httpx.post(f"{gateway}/v1/score", json=score_body()).status_code == 200
        assert sample(gateway, f"{G}_routed_total", worker=first) == 1
        assert sample(gateway, f"{G}_routed_total", worker=second) == 6

        terminate(kube_api, "p1")
        wait_for(lambda: sample(gateway, f"{G}_workers", state="gone") == 2, timeout_s=5)
        answers = []
        waiter = threading.Thread(target=lambda: answers.append(
            httpx.post(f"{gateway}/v1/score", json=score_body(), timeout=20)))
        waiter.start()
        wait_for(lambda: sample(gateway, f"{G}_waiting_requests") == 1)
        kube_api.drop_watches()  # the gateway must list and watch again to see what follows
        set_ready(kube_api, "p0", True)
        waiter.join(timeout=20)
        assert answers and answers[0].status_code == 200
        assert sample(gateway, f"{G}_routed_total", worker=first) == 2
        assert sample(gateway, f"{G}_waiting_requests") == 0
