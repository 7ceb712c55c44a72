"""builders/: the fleet's children, field by field, and valid against Kubernetes' JSON schema."""
from __future__ import annotations

import dataclasses

import kubernetes_validate
import pytest

from fleet_operator.builders import (
    build_children,
    build_deployment,
    build_hpa,
    build_pdb,
    build_service,
    format_quantity,
    server_args,
)
from fleet_operator.spec.fleet import parse_fleet
from tests.fleet_operator.crd_schema import EXAMPLES, load_yaml

K8S_VERSION = "1.33.0"
IMAGE = "registry.example/scoring-fleet:1"
FLEET_LABEL = "scoring.fleet.dev/fleet"


def fleet(**spec):
    return parse_fleet("qwen", "team-a", {"model": {"source": "Qwen/Qwen3-0.6B"}, "image": IMAGE,
                                          **spec})


def container(deployment):
    [c] = deployment["spec"]["template"]["spec"]["containers"]
    return c


def flags(args):
    return dict(zip(args[::2], args[1::2]))


def test_deployment_selects_and_labels_pods_by_the_fleet_label():
    dep = build_deployment(fleet())
    assert dep["metadata"]["name"] == "qwen" and dep["metadata"]["namespace"] == "team-a"
    assert dep["spec"]["selector"] == {"matchLabels": {FLEET_LABEL: "qwen"}}
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert labels[FLEET_LABEL] == "qwen"
    assert labels["app.kubernetes.io/instance"] == "qwen"
    assert labels["app.kubernetes.io/managed-by"] == "scoring-fleet-operator"


def test_deployment_runs_the_server_with_flags_from_the_spec():
    c = container(build_deployment(fleet(
        model={"source": "/models/m.gguf", "name": "m", "dtype": "bfloat16"},
        server={"port": 31000, "maxRunningRequests": 8, "maxPrefillTokens": 100,
                "maxTotalTokens": 200, "maxQueuedRequests": 9, "requestTimeoutSeconds": 7})))
    assert c["command"] == ["python", "-m", "server"]
    assert flags(c["args"]) == {
        "--model-path": "/models/m.gguf", "--served-model-name": "m", "--host": "0.0.0.0",
        "--port": "31000", "--dtype": "bfloat16", "--device": "cuda",
        "--max-running-requests": "8", "--max-prefill-tokens": "100", "--max-total-tokens": "200",
        "--max-queued-requests": "9", "--request-timeout": "7", "--drain-timeout": "7"}
    assert c["ports"] == [{"name": "http", "containerPort": 31000, "protocol": "TCP"}]


@pytest.mark.parametrize("gpus,device,gpu_limit,tolerated", [
    (0, "cpu", None, False),
    (1, "cuda", "1", True),
    (4, "cuda", "4", True),
], ids=["cpu", "one-gpu", "four-gpus"])
def test_gpu_limits_device_and_toleration(gpus, device, gpu_limit, tolerated):
    dep = build_deployment(fleet(resources={"gpus": gpus, "cpu": "3", "memory": "8Gi"}))
    c = container(dep)
    assert flags(c["args"])["--device"] == device
    assert c["resources"]["limits"].get("nvidia.com/gpu") == gpu_limit  # a string, never an int
    assert c["resources"]["requests"] == {"cpu": "3", "memory": "8Gi"}
    assert {k: v for k, v in c["resources"]["limits"].items() if k != "nvidia.com/gpu"} == \
        {"cpu": "3", "memory": "8Gi"}
    tolerations = dep["spec"]["template"]["spec"].get("tolerations", [])
    assert any(t["key"] == "nvidia.com/gpu" for t in tolerations) == tolerated


def test_user_gpu_toleration_is_not_duplicated():
    mine = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "l4", "effect": "NoSchedule"}
    dep = build_deployment(fleet(tolerations=[mine]))
    assert dep["spec"]["template"]["spec"]["tolerations"] == [mine]


def test_probes_hit_health_and_readiness_endpoints_on_the_named_port():
    c = container(build_deployment(fleet()))
    assert c["readinessProbe"]["httpGet"] == {"path": "/health_generate", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    startup = c["startupProbe"]
    # The server listens (/health 200) while it loads: the startup probe waits for the model.
    assert startup["httpGet"] == {"path": "/health_generate", "port": "http"}
    # Model loading may take minutes: the startup probe allows 10 of them.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600


@pytest.mark.parametrize("timeout_s", [1, 60, 120], ids=["1s", "default-60s", "120s"])
def test_the_grace_period_covers_prestop_the_whole_drain_and_the_servers_exit(timeout_s):
    dep = build_deployment(fleet(server={"requestTimeoutSeconds": timeout_s}))
    pod = dep["spec"]["template"]["spec"]
    # the drain waits as long as an admitted request may take
    assert flags(container(dep)["args"])["--drain-timeout"] == str(timeout_s)
    assert "time.sleep(5)" in " ".join(container(dep)["lifecycle"]["preStop"]["exec"]["command"])
    # preStop 5 s + drain + the server's 5 s for its last responses + a 5 s margin; a grace of
    # preStop + drain alone would SIGKILL a server still writing the answers it drained
    assert pod["terminationGracePeriodSeconds"] == 5 + timeout_s + 5 + 5


def test_restricted_security_context_and_writable_emptydirs():
    dep = build_deployment(fleet())
    pod = dep["spec"]["template"]["spec"]
    c = container(dep)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": 65532, "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"}}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert set(mounts) == {"/tmp", "/cache"}
    assert {v["name"] for v in pod["volumes"] if "emptyDir" in v} == set(mounts.values())
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HF_HOME"].startswith("/cache/")


def test_prometheus_annotations_on_the_pod_template():
    dep = build_deployment(fleet(server={"port": 31000}))
    assert dep["spec"]["template"]["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true", "prometheus.io/port": "31000",
        "prometheus.io/path": "/metrics"}


def test_scheduling_env_and_replicas_come_from_the_spec():
    dep = build_deployment(fleet(
        replicas=3, resources={"gpus": 0}, nodeSelector={"pool": "cpu"},
        tolerations=[{"key": "k", "operator": "Exists"}],
        affinity={"nodeAffinity": {"x": 1}},
        env=[{"name": "HF_HOME", "value": "/data/hf"}, {"name": "B", "value": "2"}]))
    pod = dep["spec"]["template"]["spec"]
    assert dep["spec"]["replicas"] == 3
    assert pod["nodeSelector"] == {"pool": "cpu"}
    assert pod["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert pod["affinity"] == {"nodeAffinity": {"x": 1}}
    # The user's HF_HOME replaces ours rather than appearing twice.
    assert [e for e in container(dep)["env"] if e["name"] in ("HF_HOME", "B")] == \
        [{"name": "HF_HOME", "value": "/data/hf"}, {"name": "B", "value": "2"}]


def test_empty_scheduling_fields_are_left_out():
    # The API server drops empty maps; sending {} would look like drift forever.
    pod = build_deployment(fleet(resources={"gpus": 0}))["spec"]["template"]["spec"]
    assert not {"nodeSelector", "tolerations", "affinity"} & set(pod)


def test_service_exposes_the_named_http_port_of_the_fleet_pods():
    svc = build_service(fleet(server={"port": 31000}))
    assert svc["spec"]["selector"] == {FLEET_LABEL: "qwen"}
    assert svc["spec"]["ports"] == [{"name": "http", "port": 31000, "targetPort": "http",
                                     "protocol": "TCP"}]


def test_pdb_allows_one_pod_down_at_a_time():
    pdb = build_pdb(fleet())
    assert pdb["spec"] == {"selector": {"matchLabels": {FLEET_LABEL: "qwen"}}, "maxUnavailable": 1}


def test_hpa_scales_the_fleet_itself_on_the_adapter_load_metric():
    hpa = build_hpa(fleet(autoscaling={
        "enabled": True, "mode": "hpa", "minReplicas": 2, "maxReplicas": 5,
        "targetLoadPerReplica": 12.5,
        "scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Min",
                      "policies": [{"type": "Pods", "value": 1, "periodSeconds": 30}]}}))
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "scoring.fleet.dev/v1alpha1",
                                      "kind": "ScoringFleet", "name": "qwen"}
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 5)
    assert spec["metrics"] == [{"type": "Pods", "pods": {
        "metric": {"name": "sglang_load"},
        "target": {"type": "AverageValue", "averageValue": "12500m"}}}]
    assert spec["behavior"]["scaleDown"] == {
        "stabilizationWindowSeconds": 60, "selectPolicy": "Min",
        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 30}]}
    assert spec["behavior"]["scaleUp"]["policies"] == [
        {"type": "Pods", "value": 4, "periodSeconds": 15},
        {"type": "Percent", "value": 100, "periodSeconds": 15}]


# The NetworkPolicy (on by default) first: no pod it guards exists before it.
@pytest.mark.parametrize("autoscaling,kinds", [
    ({}, ["NetworkPolicy", "Deployment", "Service", "PodDisruptionBudget"]),
    ({"enabled": True, "mode": "native"}, ["NetworkPolicy", "Deployment", "Service", "PodDisruptionBudget"]),
    ({"enabled": False, "mode": "hpa"}, ["NetworkPolicy", "Deployment", "Service", "PodDisruptionBudget"]),
    ({"enabled": True, "mode": "hpa"},
     ["NetworkPolicy", "Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"]),
], ids=["off", "native", "hpa-disabled", "hpa"])
def test_children_include_an_hpa_only_in_hpa_mode(autoscaling, kinds):
    assert [c["kind"] for c in build_children(fleet(autoscaling=autoscaling))] == kinds


@pytest.mark.parametrize("value,quantity", [(32, "32"), (32.0, "32"), (0.5, "500m"), (12.25, "12250m")],
                         ids=["int", "integral-float", "half", "fraction"])
def test_format_quantity(value, quantity):
    assert format_quantity(value) == quantity


def _example_fleets():
    for path in EXAMPLES:
        doc = load_yaml(path)
        base = parse_fleet(doc["metadata"]["name"], "default", doc["spec"])
        yield pytest.param(base, id=path.stem)
    hpa = dataclasses.replace(base.autoscaling, enabled=True, mode="hpa")
    yield pytest.param(dataclasses.replace(base, autoscaling=hpa), id="hpa-mode")


@pytest.mark.parametrize("spec", list(_example_fleets()))
def test_every_child_validates_against_the_kubernetes_schema(spec):
    for child in build_children(spec):
        if child["kind"] == "InferencePool":  # a CRD's: test_inference_pool.py validates it against its own
            continue
        kubernetes_validate.validate(child, K8S_VERSION, strict=True)


def test_server_args_are_all_strings():
    assert all(isinstance(a, str) for a in server_args(fleet()))
