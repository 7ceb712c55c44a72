"""The fleet gateway end to end: the real operator (a subprocess) and a real `python -m gateway
--fleet ... --namespace ...` (a subprocess, KUBECONFIG at the emulator) over real scoring servers
(the server's app and scheduler over a runner that costs nothing, on 127.0.0.2 and .3).

The test plays the ReplicaSet and the kubelet: the gateway process is registered as the gateway
Deployment's pod (podIP 127.0.0.1, its port), so the operator finds and scrapes it as in a cluster;
when the fleet's Deployment wants a pod, the test starts a server and adds its Pod, then marks it
ready. A fleet at 0 with a request waiting at its gateway goes to 1, and the request is answered
once the pod is ready; a terminating pod leaves the gateway's rotation, a new ready one joins it.
"""
from __future__ import annotations

import contextlib
import threading

import httpx

from server.engine import Engine
from tests.fleet_operator.crd_schema import ROOT, load_yaml
from tests.fleet_operator.loopback import free_port, pod_ip
from tests.gateway.support import gateway_process, sample, score_body
from tests.kit.runners import FakeRunner
from tests.kit.servers import cpu_config, live_server
from tests.kit.waiting import wait_for

NAME, NS = "scorer", "default"
G = "scoringfleet_gateway"
FLEET_LABELS = {"scoring.fleet.dev/fleet": NAME}


@contextlib.contextmanager
def scoring_server(host: str, port: int, **settings):
    config = cpu_config(host=host, port=port, **settings)
    with live_server(config, Engine(config, FakeRunner())) as url:
        yield url


def fleet_doc(server_port: int, gateway_port: int) -> dict:
    doc = load_yaml(ROOT / "examples" / "minimal.yaml")
    doc["metadata"]["name"] = NAME
    doc["spec"].update(
        replicas=0, server={"port": server_port}, gateway={"enabled": True, "port": gateway_port},
        # a long scale-down window: the test is about waking, not about going back to 0
        autoscaling={"enabled": True, "mode": "native", "minReplicas": 0, "maxReplicas": 2,
                     "targetLoadPerReplica": 10, "scrapeIntervalSeconds": 1,
                     "scaleDown": {"stabilizationWindowSeconds": 120}})
    return doc


def post_in_background(url: str, answers: list) -> threading.Thread:
    thread = threading.Thread(target=lambda: answers.append(
        httpx.post(f"{url}/v1/score", json=score_body(), timeout=30)))
    thread.start()
    return thread


def terminate(kube_api, name: str) -> None:
    """DELETE a pod held by a finalizer: it stays, with a deletionTimestamp, like a draining pod."""
    kube_api.request("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}",
                     {"metadata": {"finalizers": ["test.scoring.fleet.dev/hold"]}},
                     content_type="application/merge-patch+json")
    code, body = kube_api.request("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}")
    assert code in (200, 202) and body["metadata"]["deletionTimestamp"], body


def test_a_fleet_at_zero_wakes_for_a_request_waiting_at_its_gateway(cluster, kube_api, tmp_path):
    port = free_port([pod_ip(0), pod_ip(1)])
    with gateway_process("--fleet", NAME, "--namespace", NS, "--queue-timeout", "25",
                         log_path=tmp_path / "gateway.log", env=kube_api.env) as gateway:
        gateway_port = int(gateway.rsplit(":", 1)[1])
        cluster.apply(fleet_doc(port, gateway_port))
        deployment = wait_for(lambda: cluster.deployment(f"{NAME}-gateway"), "the gateway Deployment")
        [c] = deployment["spec"]["template"]["spec"]["containers"]
        assert c["args"][:4] == ["--fleet", NAME, "--namespace", NS]
        assert wait_for(lambda: cluster.get("v1", "Service", f"{NAME}-gateway"), "the gateway Service")
        for kind in ("ServiceAccount", "Role", "RoleBinding"):
            api_version = "v1" if kind == "ServiceAccount" else "rbac.authorization.k8s.io/v1"
            assert cluster.get(api_version, kind, f"{NAME}-gateway"), kind
        assert wait_for(lambda: ((cluster.fleet(NAME) or {}).get("status") or {}).get("gateway"),
                        "status.gateway")["address"] == f"http://{NAME}-gateway.{NS}.svc:{gateway_port}"
        # the gateway process is the gateway Deployment's pod: the operator scrapes it there
        kube_api.add_pod(NS, f"{NAME}-gateway-0", deployment["spec"]["template"]["metadata"]["labels"],
                         "127.0.0.1", gateway_port)
        wait_for(lambda: (cluster.fleet(NAME)["status"].get("lastDecision") or {}).get("reason")
                 == "NoDemand", "the autoscaler to see no demand at 0")

        answers: list = []
        waiter = post_in_background(gateway, answers)
        wait_for(lambda: sample(gateway, f"{G}_waiting_requests") == 1, "the request waiting")
        wait_for(lambda: cluster.deployment(NAME)["spec"]["replicas"] == 1, "the fleet woken to 1",
                 timeout_s=10)
        last = cluster.fleet(NAME)["status"]["lastDecision"]
        assert (last["reason"], last["currentReplicas"], last["gateway"]) == \
            ("ScaleFromZero", 0, {"waiting": 1})
        assert answers == []  # still waiting: no pod is ready yet

        with scoring_server(pod_ip(0), port) as first, scoring_server(pod_ip(1), port) as second:
            kube_api.add_pod(NS, f"{NAME}-0", FLEET_LABELS, pod_ip(0), port, ready=False)
            kube_api.set_pod_ready(NS, f"{NAME}-0", True)
            waiter.join(timeout=20)
            assert [a.status_code for a in answers] == [200]
            assert sample(gateway, f"{G}_routed_total", worker=first) == 1

            terminate(kube_api, f"{NAME}-0")  # leaves the rotation on the watch event
            wait_for(lambda: sample(gateway, f"{G}_workers", state="gone") == 1, "the pod gone")
            waiter = post_in_background(gateway, answers)
            wait_for(lambda: sample(gateway, f"{G}_waiting_requests") == 1, "a request waiting")
            kube_api.add_pod(NS, f"{NAME}-1", FLEET_LABELS, pod_ip(1), port)
            waiter.join(timeout=20)
            assert [a.status_code for a in answers] == [200, 200]
            assert sample(gateway, f"{G}_routed_total", worker=second) == 1
            assert sample(gateway, f"{G}_routed_total", worker=first) == 1
