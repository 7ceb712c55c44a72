"""reconcile.py in-process against the emulator: one path, idempotent, invalid specs reported once."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from fleet_operator import kube
from fleet_operator.context import OperatorConfig, OperatorContext
from fleet_operator.reconcile import reconcile_fleet
from tests.fleet_operator.crd_schema import CRD_PATH, ROOT
from tests.kit.waiting import wait_for

T0 = datetime(2026, 11, 29, 18, 0, tzinfo=timezone.utc)
NAME = "qwen-scorer"


@pytest.fixture()
def api(kube_api):
    kube_api.apply_file(CRD_PATH)
    kube_api.apply_file(ROOT / "examples" / "minimal.yaml")
    return kube_api.client()


def at(api, now):
    """A fresh operator context whose clock stands at `now`."""
    return OperatorContext(api, clock=lambda: now)


def reconcile(api, now=T0):
    return reconcile_fleet(at(api, now), "default", NAME)


def resource_versions(api):
    kinds = [("apps/v1", "Deployment"), ("v1", "Service"), ("policy/v1", "PodDisruptionBudget")]
    objs = [kube.get(api, v, k, "default", NAME) for v, k in kinds] + \
        [kube.get_fleet(api, "default", NAME)]
    return [o["metadata"]["resourceVersion"] for o in objs]


def test_first_reconcile_creates_every_child(api):
    result = reconcile(api)
    assert result.spec_error is None
    assert result.actions == {"NetworkPolicy": "created", "Deployment": "created", "Service": "created",
                              "PodDisruptionBudget": "created"}


def test_second_reconcile_writes_nothing(api):
    reconcile(api)
    # The emulator's Deployment controller reports the pods ready soon after; wait for it, so that
    # the next reconcile carries that into the fleet's status and the one after has nothing to do.
    wait_for(lambda: (kube.get(api, "apps/v1", "Deployment", "default", NAME).get("status") or {})
             .get("readyReplicas") == 1, "the Deployment controller")
    reconcile(api)
    before = resource_versions(api)
    result = reconcile(api, now=T0 + timedelta(minutes=1))
    assert set(result.actions.values()) == {"unchanged"}
    assert resource_versions(api) == before


def test_invalid_spec_sets_spec_valid_false_and_one_event(kube_api, api):
    kube_api.kubectl("patch", "sf", NAME, "--type=json", "-p",
                     '[{"op": "remove", "path": "/spec/image"}]')
    for minute in range(3):  # resume, a resync, another resync: one Event in all
        result = reconcile(api, now=T0 + timedelta(minutes=minute))
        assert "spec.image is required" in result.spec_error
    fleet = kube.get_fleet(api, "default", NAME)
    spec_valid = next(c for c in fleet["status"]["conditions"] if c["type"] == "SpecValid")
    assert spec_valid["status"] == "False"
    assert spec_valid["lastTransitionTime"] == "2026-11-29T18:00:00Z"
    _, events = kube_api.request(
        "GET", "/api/v1/namespaces/default/events?fieldSelector=reason=InvalidSpec")
    assert len(events["items"]) == 1
    assert kube.get(api, "apps/v1", "Deployment", "default", NAME) is None


def test_a_missing_or_replaced_fleet_is_left_alone(api):
    assert reconcile_fleet(at(api, T0), "default", "nope") is None
    assert reconcile_fleet(at(api, T0), "default", NAME, uid="another-uid") is None


GATEWAY_CHILDREN = [("v1", "ServiceAccount"), ("rbac.authorization.k8s.io/v1", "Role"),
                    ("rbac.authorization.k8s.io/v1", "RoleBinding"), ("apps/v1", "Deployment"),
                    ("v1", "Service"), ("networking.k8s.io/v1", "NetworkPolicy")]


def gateway_children(api) -> list:
    return [kube.get(api, v, k, "default", f"{NAME}-gateway") for v, k in GATEWAY_CHILDREN]


def test_enabling_the_gateway_adds_its_children_and_disabling_removes_them(kube_api, api):
    kube_api.kubectl("patch", "sf", NAME, "--type=merge", "-p", '{"spec": {"gateway": {"enabled": true}}}')
    result = reconcile(api)
    assert {k: v for k, v in result.actions.items() if "gateway" in k} == {
        f"{kind} {NAME}-gateway": "created" for _, kind in GATEWAY_CHILDREN}
    fleet = kube.get_fleet(api, "default", NAME)
    assert all(child["metadata"]["ownerReferences"][0]["uid"] == fleet["metadata"]["uid"]
               for child in gateway_children(api))
    assert fleet["status"]["gateway"]["address"] == f"http://{NAME}-gateway.default.svc:30080"
    assert set(reconcile(api).actions.values()) == {"unchanged"}  # idempotent

    kube_api.kubectl("patch", "sf", NAME, "--type=merge", "-p", '{"spec": {"gateway": {"enabled": false}}}')
    result = reconcile(api)
    assert {k: v for k, v in result.actions.items() if "gateway" in k} == {
        f"{kind} {NAME}-gateway": "deleted" for _, kind in GATEWAY_CHILDREN}
    assert gateway_children(api) == [None] * len(GATEWAY_CHILDREN)
    assert "gateway" not in kube.get_fleet(api, "default", NAME)["status"]
    assert kube.get(api, "apps/v1", "Deployment", "default", NAME) is not None  # the fleet's own stay


def test_the_gateway_runs_the_operators_gateway_image_and_the_fleet_the_server_image(kube_api, api):
    # the chart sets SCORINGFLEET_GATEWAY_IMAGE to the control image (no torch)
    kube_api.kubectl("patch", "sf", NAME, "--type=merge", "-p", '{"spec": {"gateway": {"enabled": true}}}')
    ctx = OperatorContext(api, config=OperatorConfig(gateway_image="control:1"), clock=lambda: T0)
    reconcile_fleet(ctx, "default", NAME)
    gateway = kube.get(api, "apps/v1", "Deployment", "default", f"{NAME}-gateway")
    fleet = kube.get(api, "apps/v1", "Deployment", "default", NAME)
    assert gateway["spec"]["template"]["spec"]["containers"][0]["image"] == "control:1"
    assert fleet["spec"]["template"]["spec"]["containers"][0]["image"] != "control:1"


def test_a_fleet_never_deletes_another_fleets_children_of_the_gateways_name(kube_api, api):
    # Fleet qwen-scorer (gateway off) wants no `qwen-scorer-gateway` children; fleet
    # qwen-scorer-gateway's own Deployment and Service have exactly those names.
    other = f"{NAME}-gateway"
    kube_api.create({"apiVersion": "scoring.fleet.dev/v1alpha1", "kind": "ScoringFleet",
                     "metadata": {"name": other, "namespace": "default"},
                     "spec": {"model": {"source": "Qwen/Qwen3-0.6B"}, "image": "scoring-fleet:0.1.0"}})
    assert reconcile_fleet(at(api, T0), "default", other).actions["Deployment"] == "created"
    mine = {k: kube.get(api, v, k, "default", other)["metadata"]["uid"]
            for v, k in [("apps/v1", "Deployment"), ("v1", "Service")]}
    for minute in range(2):
        result = reconcile(api, now=T0 + timedelta(minutes=minute))
        assert "deleted" not in result.actions.values()
    assert {k: kube.get(api, v, k, "default", other)["metadata"]["uid"]
            for v, k in [("apps/v1", "Deployment"), ("v1", "Service")]} == mine


def test_a_fleet_not_natively_autoscaled_keeps_no_autoscaler_status(api):
    reconcile(api)  # minimal.yaml: autoscaling off
    kube.patch_fleet_status(api, "default", NAME, {
        "lastDecision": {"reason": "ScaleUp"}, "running": 1, "waiting": 0, "lastScaleTime": "2026-11-29T17:00:00Z",
        "autoscalerHistory": {}, "conditions": kube.get_fleet(api, "default", NAME)["status"]["conditions"]
        + [{"type": "ScalingLimited", "status": "False", "reason": "DesiredWithinRange", "message": "",
            "lastTransitionTime": "2026-11-29T17:00:00Z"}]})  # left from its native days
    reconcile(api, now=T0 + timedelta(minutes=1))
    status = kube.get_fleet(api, "default", NAME)["status"]
    assert not {"lastDecision", "running", "waiting", "lastScaleTime", "autoscalerHistory"} & set(status)
    assert {c["type"] for c in status["conditions"]} == {"SpecValid", "Ready"}
    assert status["desiredReplicas"] == 1


def test_the_network_policy_admits_the_operators_namespace_is_kept_and_goes_when_disabled(kube_api, api):
    ctx = OperatorContext(api, config=OperatorConfig(namespace="scoring-system"), clock=lambda: T0)
    reconcile_fleet(ctx, "default", NAME)
    path = kube.object_path("networking.k8s.io/v1", "NetworkPolicy", "default", NAME)
    built = kube.request(api, "GET", path)["spec"]
    operator_peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "scoring-system"}}}
    assert operator_peer in [peer for rule in built["ingress"] for peer in rule["from"]]
    # someone opens the scoring pods to everyone: the next reconcile closes them again
    kube.request(api, "PATCH", path, body={"spec": {"ingress": [{}]}}, content_type=kube.MERGE_PATCH)
    assert reconcile_fleet(ctx, "default", NAME).actions["NetworkPolicy"] == "patched"
    assert kube.request(api, "GET", path)["spec"] == built

    kube_api.kubectl("patch", "sf", NAME, "--type=merge", "-p", '{"spec": {"networkPolicy": {"enabled": false}}}')
    assert reconcile_fleet(ctx, "default", NAME).actions["NetworkPolicy"] == "deleted"
    assert kube.get(api, "networking.k8s.io/v1", "NetworkPolicy", "default", NAME) is None


def test_a_gateway_for_several_fleets_reads_the_model_each_serves(kube_api, api):
    # `classifier` serves the model `bge` (also as `bge-base`); `reranker` is listed before it exists
    kube_api.create({"apiVersion": "scoring.fleet.dev/v1alpha1", "kind": "ScoringFleet",
                     "metadata": {"name": "classifier", "namespace": "default"},
                     "spec": {"model": {"source": "BAAI/bge-reranker-base", "name": "bge", "aliases": ["bge-base"]},
                              "image": "scoring-fleet:0.1.0", "replicas": 0}})
    kube_api.kubectl("patch", "sf", NAME, "--type=merge", "-p",
                     '{"spec": {"gateway": {"enabled": true, "fleets": ["classifier", "reranker"]}}}')
    reconcile(api)

    def args() -> list[str]:
        deployment = kube.get(api, "apps/v1", "Deployment", "default", f"{NAME}-gateway")
        return deployment["spec"]["template"]["spec"]["containers"][0]["args"]

    assert args()[-6:] == ["--fleet", "classifier", "--fleet-model", "classifier=bge,bge-base", "--fleet", "reranker"]
    assert kube.get_fleet(api, "default", NAME)["status"]["gateway"]["fleets"] == [
        {"name": NAME, "model": NAME}, {"name": "classifier", "model": "bge"}, {"name": "reranker"}]
    # the listed fleet appears: the next reconcile (the resync timer's) names its model
    kube_api.create({"apiVersion": "scoring.fleet.dev/v1alpha1", "kind": "ScoringFleet",
                     "metadata": {"name": "reranker", "namespace": "default"},
                     "spec": {"model": {"source": "Qwen/Qwen3-Reranker-0.6B"}, "image": "scoring-fleet:0.1.0"}})
    assert reconcile(api, now=T0 + timedelta(minutes=1)).actions[f"Deployment {NAME}-gateway"] == "patched"
    assert args()[-2:] == ["--fleet-model", "reranker=reranker"]
