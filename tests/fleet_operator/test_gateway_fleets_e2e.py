"""One fleet's gateway in front of two fleets, end to end: the real operator (a subprocess) and a real
`python -m gateway` started with the args the operator wrote into the gateway Deployment (KUBECONFIG
at the emulator), over real scoring servers (the server's app and scheduler over a runner that costs
nothing).

Fleet `front` (one pod, serving `scorer`) lists fleet `classifier` (model `bge`, minReplicas 0, no
gateway of its own) in spec.gateway.fleets. The test plays the kubelet, as test_gateway_e2e.py does.
A request for `bge` waits at front's gateway, for classifier alone: front's requests are answered
meanwhile, front is not woken or grown, classifier goes 0 -> 1 on its own waiting gauge, and the
request is answered by classifier's pod once it is ready.
"""
from __future__ import annotations

import threading

import httpx

from tests.fleet_operator.crd_schema import ROOT, load_yaml, schema_errors
from tests.fleet_operator.loopback import free_port, pod_ip
from tests.fleet_operator.test_gateway_e2e import scoring_server
from tests.gateway.support import gateway_process, sample, score_body
from tests.kit.waiting import wait_for

NS = "default"
G = "scoringfleet_gateway"
ZERO = {"enabled": True, "mode": "native", "minReplicas": 0, "maxReplicas": 2, "targetLoadPerReplica": 10,
        "scrapeIntervalSeconds": 1, "scaleDown": {"stabilizationWindowSeconds": 120}}


def fleet_doc(name: str, model: str, server_port: int, **spec) -> dict:
    doc = load_yaml(ROOT / "examples" / "minimal.yaml")
    doc["metadata"]["name"] = name
    doc["spec"]["model"]["name"] = model
    doc["spec"].update(server={"port": server_port}, **spec)
    assert schema_errors(doc) == []
    return doc


def gateway_args(cluster) -> tuple[list[str], dict]:
    """The args the operator gave front's gateway (less where it listens), and its pods' labels.
    classifier's model is in them from the first reconcile: it was applied first."""
    def template() -> dict | None:
        return ((cluster.deployment("front-gateway") or {}).get("spec") or {}).get("template")

    pod = wait_for(template, "the gateway Deployment")
    args = pod["spec"]["containers"][0]["args"]
    listen = {args.index("--host"), args.index("--host") + 1, args.index("--port"), args.index("--port") + 1}
    return [a for i, a in enumerate(args) if i not in listen], pod["metadata"]["labels"]


def test_a_fleet_at_zero_behind_another_fleets_gateway_wakes_alone(cluster, kube_api, tmp_path):
    port = free_port([pod_ip(0), pod_ip(1)])
    cluster.apply(fleet_doc("classifier", "bge", port, replicas=0, autoscaling=ZERO))
    cluster.apply(fleet_doc("front", "scorer", port, replicas=1,
                            gateway={"enabled": True, "fleets": ["classifier"], "queueTimeoutSeconds": 25}))
    args, labels = gateway_args(cluster)
    assert args[:2] == ["--fleet", "front"]
    assert args[-4:] == ["--fleet", "classifier", "--fleet-model", "classifier=bge"]
    with scoring_server(pod_ip(0), port, served_model_name="scorer") as front_pod, \
            scoring_server(pod_ip(1), port, served_model_name="bge") as classifier_pod, \
            gateway_process(*args, log_path=tmp_path / "gateway.log", env=kube_api.env) as gateway:
        kube_api.add_pod(NS, "front-0", {"scoring.fleet.dev/fleet": "front"}, pod_ip(0), port)
        kube_api.add_pod(NS, "front-gateway-0", labels, "127.0.0.1", int(gateway.rsplit(":", 1)[1]))
        wait_for(lambda: (cluster.fleet("classifier").get("status", {}).get("lastDecision") or {})
                 .get("reason") == "NoDemand", "classifier's autoscaler to see no demand at 0")

        answers: list = []
        waiter = threading.Thread(target=lambda: answers.append(httpx.post(
            f"{gateway}/v1/score", json={**score_body(), "model": "bge"}, timeout=30)))
        waiter.start()
        wait_for(lambda: sample(gateway, f"{G}_waiting_requests", fleet="classifier") == 1, "bge waiting")
        # front's own requests are answered meanwhile, by front's pod
        reply = httpx.post(f"{gateway}/v1/score", json={**score_body(), "model": "scorer"}, timeout=10)
        assert reply.status_code == 200 and sample(gateway, f"{G}_routed_total", worker=front_pod) == 1
        wait_for(lambda: cluster.deployment("classifier")["spec"]["replicas"] == 1, "classifier woken",
                 timeout_s=10)
        assert cluster.fleet("classifier")["status"]["lastDecision"]["gateway"] == {"waiting": 1}
        assert cluster.deployment("front")["spec"]["replicas"] == 1  # the other fleet is not woken or grown
        assert answers == []

        kube_api.add_pod(NS, "classifier-0", {"scoring.fleet.dev/fleet": "classifier"}, pod_ip(1), port)
        waiter.join(timeout=20)
        assert [a.status_code for a in answers] == [200]
        assert sample(gateway, f"{G}_routed_total", worker=classifier_pod) == 1
        assert cluster.fleet("front")["status"]["gateway"]["fleets"] == [
            {"name": "front", "model": "scorer"}, {"name": "classifier", "model": "bge"}]
