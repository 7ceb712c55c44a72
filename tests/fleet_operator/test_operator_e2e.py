"""The real operator (`python -m fleet_operator --standalone -A`, a subprocess) against the emulator.

Users act through kubectl (apply, patch, scale, set image, delete), as they would; the tests read the
results over the API. Every wait is bounded polling; nothing sleeps for correctness.
"""
from __future__ import annotations

import json

from tests.fleet_operator.crd_schema import CRD_PATH, ROOT, load_yaml
from tests.fleet_operator.operator_process import FLEET, Cluster, running_operator
from tests.kit.waiting import wait_for

EXAMPLES = ROOT / "examples"
IMAGE = "scoring-fleet:0.1.0"


def minimal() -> dict:
    return load_yaml(EXAMPLES / "minimal.yaml")


def test_examples_create_deployment_service_and_pdb(cluster):
    cluster.kubectl("apply", "--validate=false", "-f", str(EXAMPLES))
    for path in sorted(EXAMPLES.glob("*.yaml")):
        doc = load_yaml(path)
        name = doc["metadata"]["name"]
        dep = wait_for(lambda: cluster.deployment(name), f"the Deployment of {path.name}")
        fleet = cluster.fleet(name)
        [owner] = dep["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == \
            ("ScoringFleet", name, fleet["metadata"]["uid"])
        c = dep["spec"]["template"]["spec"]["containers"][0]
        assert c["image"] == doc["spec"]["image"]
        assert c["args"][c["args"].index("--model-path") + 1] == doc["spec"]["model"]["source"]
        assert c["readinessProbe"]["httpGet"]["path"] == "/health_generate"
        gpus = doc["spec"].get("resources", {}).get("gpus", 1)
        assert c["resources"]["limits"].get("nvidia.com/gpu") == (str(gpus) if gpus else None)
        svc = wait_for(lambda: cluster.get("v1", "Service", name), f"the Service of {name}")
        assert svc["spec"]["ports"][0]["name"] == "http"
        pdb = wait_for(lambda: cluster.get("policy/v1", "PodDisruptionBudget", name), "the PDB")
        assert pdb["spec"]["selector"]["matchLabels"] == {"scoring.fleet.dev/fleet": name}
    full = wait_for(lambda: (cluster.fleet("qwen-scorer-full") or {}).get("status", {})
                    .get("readyReplicas") == 2 and cluster.fleet("qwen-scorer-full"),
                    "the full fleet's status to show 2 ready replicas")
    status = full["status"]
    assert status["selector"] == "scoring.fleet.dev/fleet=qwen-scorer-full"
    assert status["observedGeneration"] == full["metadata"]["generation"]
    assert {c["type"]: c["status"] for c in status["conditions"]} == \
        {"SpecValid": "True", "Ready": "True"}


def test_kubectl_get_shows_the_printer_columns_with_real_values(cluster):
    cluster.apply(minimal())
    wait_for(lambda: (cluster.fleet() or {}).get("status", {}).get("readyReplicas") == 1,
             "status.readyReplicas")
    header, row = cluster.kubectl("get", "sf").splitlines()[:2]
    assert header.split() == ["NAME", "REPLICAS", "READY", "DESIRED", "RUNNING", "WAITING",
                              "REASON", "AGE"]
    # Autoscaling off: Desired is spec.replicas (Running/Waiting come from native scrapes only).
    assert row.split()[:4] == [FLEET, "1", "1", "1"]


def test_spec_edits_roll_out_to_the_deployment(cluster):
    cluster.apply(minimal())
    wait_for(cluster.deployment, "the Deployment")
    cluster.patch_fleet(FLEET, {"spec": {"image": "registry.example/scorer:2", "replicas": 2,
                                         "server": {"maxRunningRequests": 64}}})

    def rolled_out():
        c = cluster.container()
        return (c["image"] == "registry.example/scorer:2"
                and c["args"][c["args"].index("--max-running-requests") + 1] == "64"
                and cluster.deployment()["spec"]["replicas"] == 2)

    wait_for(rolled_out, "image, flag and replicas on the Deployment")
    fleet = wait_for(lambda: (f := cluster.fleet())["status"].get("observedGeneration") ==
                     f["metadata"]["generation"] and f, "observedGeneration to catch up")
    assert fleet["metadata"]["generation"] >= 2


def test_kubectl_scale_reaches_the_deployment(cluster):
    cluster.apply(minimal())
    wait_for(cluster.deployment, "the Deployment")
    cluster.kubectl("scale", f"sf/{FLEET}", "--replicas=3")
    wait_for(lambda: cluster.deployment()["spec"]["replicas"] == 3, "Deployment replicas 3")
    # The emulator's Deployment controller reports 3 ready; the fleet's status follows.
    wait_for(lambda: [cluster.fleet()["status"].get(k)
                      for k in ("replicas", "readyReplicas", "desiredReplicas")] == [3, 3, 3],
             "status replicas/readyReplicas/desiredReplicas 3/3/3")
    assert cluster.kubectl("get", f"sf/{FLEET}", "-o", "jsonpath={.spec.replicas}") == "3"


def test_hand_edits_of_managed_deployment_fields_are_reverted(cluster):
    cluster.apply(minimal())
    wait_for(cluster.deployment, "the Deployment")
    cluster.kubectl("set", "image", f"deployment/{FLEET}", "server=evil.example/miner:1")
    cluster.kubectl("scale", f"deployment/{FLEET}", "--replicas=5")
    wait_for(lambda: cluster.container()["image"] == IMAGE and
             cluster.deployment()["spec"]["replicas"] == 1,
             "the image and replicas to be reverted")
    assert any("Deployment patched" in e["message"] for e in cluster.events(FLEET, "Reconciled"))


def test_a_deleted_deployment_is_recreated(cluster):
    cluster.apply(minimal())
    uid = wait_for(cluster.deployment, "the Deployment")["metadata"]["uid"]
    cluster.kubectl("delete", f"deployment/{FLEET}")
    wait_for(lambda: (cluster.deployment() or {}).get("metadata", {}).get("uid") not in (None, uid),
             "a new Deployment")


def test_drift_on_the_unwatched_service_is_reverted_by_the_resync_timer(cluster):
    cluster.apply(minimal())
    wait_for(lambda: cluster.get("v1", "Service", FLEET), "the Service")
    cluster.kubectl("patch", f"service/{FLEET}", "--type=merge", "-p",
                    json.dumps({"spec": {"selector": {"scoring.fleet.dev/fleet": "someone-else"}}}))
    wait_for(lambda: cluster.get("v1", "Service", FLEET)["spec"]["selector"] ==
             {"scoring.fleet.dev/fleet": FLEET}, "the Service selector to be reverted")


def test_deleting_the_fleet_removes_its_children(cluster):
    cluster.apply(minimal())
    wait_for(lambda: cluster.get("policy/v1", "PodDisruptionBudget", FLEET), "the children")
    cluster.kubectl("delete", f"sf/{FLEET}", "--wait=false")
    wait_for(lambda: cluster.fleet() is None, "the fleet to go (finalizer released)")
    wait_for(lambda: not any(cluster.get(v, k, FLEET) for v, k in [
        ("apps/v1", "Deployment"), ("v1", "Service"), ("policy/v1", "PodDisruptionBudget")]),
        "the Deployment, Service and PDB to be garbage-collected")


def test_invalid_fleet_is_reported_once_while_another_keeps_working(cluster):
    bad = minimal()
    bad["metadata"]["name"] = "no-image"
    del bad["spec"]["image"]  # schema-valid, but a GPU fleet needs an explicit image
    cluster.apply(bad)
    cluster.apply(minimal())
    spec_valid = wait_for(lambda: cluster.condition("no-image", "SpecValid"), "SpecValid")
    assert (spec_valid["status"], spec_valid["reason"]) == ("False", "InvalidSpec")
    assert "spec.image is required" in spec_valid["message"]
    [event] = wait_for(lambda: cluster.events("no-image", "InvalidSpec"), "a Warning Event")
    assert event["type"] == "Warning" and "spec.image" in event["message"]
    assert cluster.deployment("no-image") is None

    # The good fleet is served, and keeps being served, by the same operator process.
    cluster.patch_fleet(FLEET, {"spec": {"replicas": 2}})
    wait_for(lambda: (cluster.deployment() or {}).get("spec", {}).get("replicas") == 2,
             "the valid fleet to scale")
    # No hot retry loop: by now the invalid fleet has still one Event, not one per retry.
    assert len(cluster.events("no-image", "InvalidSpec")) == 1

    cluster.patch_fleet("no-image", {"spec": {"image": IMAGE}})
    wait_for(lambda: cluster.condition("no-image", "SpecValid").get("status") == "True",
             "SpecValid=True after the fix")
    wait_for(lambda: cluster.deployment("no-image"), "the fixed fleet's Deployment")


def test_hpa_mode_owns_an_hpa_that_goes_away_in_native_mode(cluster):
    doc = minimal()
    doc["spec"]["autoscaling"] = {"enabled": True, "mode": "hpa", "minReplicas": 1,
                                  "maxReplicas": 4}
    cluster.apply(doc)
    hpa = wait_for(lambda: cluster.get("autoscaling/v2", "HorizontalPodAutoscaler", FLEET), "HPA")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "scoring.fleet.dev/v1alpha1",
                                             "kind": "ScoringFleet", "name": FLEET}
    assert hpa["metadata"]["ownerReferences"][0]["name"] == FLEET
    cluster.patch_fleet(FLEET, {"spec": {"autoscaling": {"mode": "native"}}})
    wait_for(lambda: cluster.get("autoscaling/v2", "HorizontalPodAutoscaler", FLEET) is None,
             "the HPA to be deleted")


def test_namespaced_operator_serves_only_its_namespace(kube_api, tmp_path):
    kube_api.apply_file(CRD_PATH)
    kube_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    cluster = Cluster(kube_api)
    mine, other = minimal(), minimal()
    mine["metadata"]["namespace"] = "team-a"
    with running_operator(kube_api, tmp_path / "operator.log", "-n", "team-a"):
        cluster.apply(other)
        cluster.apply(mine)
        wait_for(lambda: cluster.get("apps/v1", "Deployment", FLEET, ns="team-a"),
                 "the Deployment in team-a")
        # By the time team-a's fleet is Ready, one in default would have been served too.
        wait_for(lambda: cluster.get("scoring.fleet.dev/v1alpha1", "ScoringFleet", FLEET,
                                     ns="team-a").get("status", {}).get("readyReplicas") == 1,
                 "team-a's fleet status")
        assert cluster.deployment() is None
        assert "status" not in cluster.fleet()


def test_auth_cache_token_and_network_policy_through_the_real_operator(kube_api, tmp_path):
    # the chart's downward-API env: the operator's namespace, which the NetworkPolicy admits
    kube_api.apply_file(CRD_PATH)
    cluster = Cluster(kube_api)
    doc = minimal()
    doc["spec"]["model"].update(cache={"persistentVolumeClaim": {"claimName": "hf-cache"}},
                                hfTokenSecretRef={"name": "hf", "key": "token"})
    doc["spec"].update(auth={"apiKeySecretRef": {"name": "api", "key": "key"}}, gateway={"enabled": True})
    with running_operator(kube_api, tmp_path / "operator.log", "-A", env={"POD_NAMESPACE": "scoring-system"}):
        cluster.apply(doc)
        policy = wait_for(lambda: cluster.get("networking.k8s.io/v1", "NetworkPolicy", FLEET), "the policy")
        peers = [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]
        assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "scoring-system"}}} in peers
        gateway = wait_for(lambda: cluster.deployment(f"{FLEET}-gateway"), "the gateway")
        key = {"name": "SCORINGFLEET_API_KEY", "valueFrom": {"secretKeyRef": {"name": "api", "key": "key"}}}
        for c in (cluster.container(), gateway["spec"]["template"]["spec"]["containers"][0]):
            assert key in c["env"] and "--api-key" not in c["args"]
        server = cluster.container()
        env = {e["name"]: e for e in server["env"]}
        assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
        assert {"name": "model-cache", "mountPath": env["HF_HOME"]["value"]} in server["volumeMounts"]
        assert server["startupProbe"]["failureThreshold"] * server["startupProbe"]["periodSeconds"] == 600

        cluster.patch_fleet(FLEET, {"spec": {"networkPolicy": {"enabled": False}}})
        wait_for(lambda: cluster.get("networking.k8s.io/v1", "NetworkPolicy", FLEET) is None
                 and cluster.get("networking.k8s.io/v1", "NetworkPolicy", f"{FLEET}-gateway") is None,
                 "both policies gone")
