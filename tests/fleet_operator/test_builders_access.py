"""The fleet's access and delivery fields, rendered: the API key and the hub token from Secrets (env,
never args), the model cache volume at HF_HOME, the startupProbe's budget, and the two
NetworkPolicies (who reaches the scoring pods and the gateway), valid against Kubernetes' schema."""
from __future__ import annotations

import kubernetes_validate
import pytest

from fleet_operator.builders import build_children, network_policies, unwanted_children
from fleet_operator.builders.deployment import build_deployment
from fleet_operator.builders.gateway import build_gateway_deployment
from fleet_operator.builders.network_policy import build_gateway_network_policy, build_network_policy
from fleet_operator.context import OperatorConfig
from fleet_operator.spec.fleet import SpecError, parse_fleet
from tests.fleet_operator.test_builders import IMAGE, K8S_VERSION

FLEET_LABEL = "scoring.fleet.dev/fleet"
GATEWAY_LABEL = "scoring.fleet.dev/gateway"
API_KEY_REF = {"name": "scoring-api-key", "key": "api-key"}
PROMETHEUS = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}


def fleet(operator_namespace="scoring-system", model=None, **spec):
    return parse_fleet("qwen", "team-a", {"model": {"source": "Qwen/Qwen3-0.6B", **(model or {})},
                                          "image": IMAGE, **spec},
                       OperatorConfig(namespace=operator_namespace))


def container(deployment):
    [c] = deployment["spec"]["template"]["spec"]["containers"]
    return c


def env_of(deployment):
    return {e["name"]: e for e in container(deployment)["env"]}


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def pod_labels(deployment):
    return deployment["spec"]["template"]["metadata"]["labels"]


# --- spec.auth.apiKeySecretRef ---------------------------------------------------------------

def test_the_api_key_reaches_server_and_gateway_from_the_secret_and_never_args():
    f = fleet(auth={"apiKeySecretRef": API_KEY_REF}, gateway={"enabled": True})
    for deployment in (build_deployment(f), build_gateway_deployment(f)):
        assert env_of(deployment)["SCORINGFLEET_API_KEY"] == {
            "name": "SCORINGFLEET_API_KEY", "valueFrom": {"secretKeyRef": API_KEY_REF}}
        args = " ".join(container(deployment)["args"])
        assert "--api-key" not in args and "scoring-api-key" not in args


def test_without_auth_neither_pod_gets_a_key():
    f = fleet(gateway={"enabled": True})
    for deployment in (build_deployment(f), build_gateway_deployment(f)):
        assert "SCORINGFLEET_API_KEY" not in env_of(deployment)


def test_probes_stay_on_the_open_endpoints_with_auth_on():
    # /health and /health_generate take no key: a probe with none must not see 401
    c = container(build_deployment(fleet(auth={"apiKeySecretRef": API_KEY_REF})))
    paths = {c[p]["httpGet"]["path"] for p in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert paths == {"/health", "/health_generate"}


# --- spec.model.cache, hfTokenSecretRef, startupTimeoutSeconds --------------------------------

def test_a_claim_cache_is_mounted_at_hf_home_and_the_token_comes_from_its_secret():
    dep = build_deployment(fleet(model={"cache": {"persistentVolumeClaim": {"claimName": "hf-cache"}},
                                        "hfTokenSecretRef": {"name": "hf", "key": "token"}}))
    pod, env = dep["spec"]["template"]["spec"], env_of(dep)
    volume = next(v for v in pod["volumes"] if "persistentVolumeClaim" in v)
    assert volume["persistentVolumeClaim"] == {"claimName": "hf-cache"}
    [mount] = [m for m in container(dep)["volumeMounts"] if m["name"] == volume["name"]]
    assert mount == {"name": volume["name"], "mountPath": env["HF_HOME"]["value"]}
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN",
                               "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    assert "HF_HUB_OFFLINE" not in env  # a writable cache: download on a miss
    assert "hf" not in container(dep)["args"]


@pytest.mark.parametrize("cache", [
    {"persistentVolumeClaim": {"claimName": "models", "readOnly": True}},
    {"image": {"reference": "registry.example/qwen-weights:1", "pullPolicy": "IfNotPresent"}},
], ids=["read-only-claim", "image-volume"])
def test_a_read_only_cache_is_mounted_read_only_and_the_hub_client_stays_offline(cache):
    dep = build_deployment(fleet(model={"cache": cache}))
    [mount] = [m for m in container(dep)["volumeMounts"] if m["name"] == "model-cache"]
    assert mount["readOnly"] is True
    # online, the hub client would ask for the newest revision and lock files in a cache it cannot write
    assert env_of(dep)["HF_HUB_OFFLINE"] == {"name": "HF_HUB_OFFLINE", "value": "1"}


def test_the_cache_follows_a_users_hf_home():
    dep = build_deployment(fleet(model={"cache": {"hostPath": {"path": "/var/lib/hf", "type": "DirectoryOrCreate"}}},
                                 env=[{"name": "HF_HOME", "value": "/data/hf"}]))
    [mount] = [m for m in container(dep)["volumeMounts"] if m["name"] == "model-cache"]
    assert mount["mountPath"] == "/data/hf" == env_of(dep)["HF_HOME"]["value"]


def test_without_a_cache_each_pod_downloads_into_its_own_emptydir():
    dep = build_deployment(fleet())
    assert [v for v in dep["spec"]["template"]["spec"]["volumes"] if "emptyDir" not in v] == []
    assert {m["name"] for m in container(dep)["volumeMounts"]} == {"tmp", "cache"}


@pytest.mark.parametrize("timeout_s,threshold", [(10, 1), (600, 60), (1205, 121)],
                         ids=["minimum", "default", "rounded-up"])
def test_the_startup_probe_covers_the_load_budget_then_liveness_takes_over(timeout_s, threshold):
    c = container(build_deployment(fleet(server={"startupTimeoutSeconds": timeout_s})))
    startup = c["startupProbe"]
    assert startup["failureThreshold"] == threshold
    assert startup["periodSeconds"] * startup["failureThreshold"] >= timeout_s  # never cut short
    # liveness and readiness stay as they were: the kubelet runs them once the startup probe passed
    assert c["livenessProbe"]["failureThreshold"] * c["livenessProbe"]["periodSeconds"] == 30
    assert c["readinessProbe"]["httpGet"]["path"] == "/health_generate"


@pytest.mark.parametrize("model,expected", [
    ({"cache": {}}, "exactly one volume source"),
    ({"cache": {"emptyDir": {}, "hostPath": {"path": "/x"}}}, "exactly one volume source"),
    ({"cache": {"configMap": {"name": "x"}}}, "not a volume source for a model cache"),
    ({"cache": {"persistentVolumeClaim": "hf"}}, "must be an object"),
    ({"hfTokenSecretRef": {"name": "hf"}}, "hfTokenSecretRef.key is required"),
], ids=["no-source", "two-sources", "config-map", "not-an-object", "token-without-key"])
def test_bad_delivery_fields_are_spec_errors(model, expected):
    with pytest.raises(SpecError, match=expected):
        fleet(model=model)


def test_an_api_key_ref_without_a_name_is_a_spec_error():
    with pytest.raises(SpecError, match="apiKeySecretRef.name is required"):
        fleet(auth={"apiKeySecretRef": {"key": "k"}})


# --- spec.networkPolicy ---------------------------------------------------------------------

def peers_of(policy):
    return [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]


def test_the_scoring_pods_policy_admits_only_the_gateway_the_operator_and_the_listed_peers():
    f = fleet(gateway={"enabled": True}, networkPolicy={"allowFrom": [PROMETHEUS]})
    policy = build_network_policy(f)
    assert (policy["metadata"]["name"], policy["metadata"]["namespace"]) == ("qwen", "team-a")
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress (the hub, the API) stays open
    # it selects the scoring pods, and not the gateway's
    assert selects(policy["spec"]["podSelector"], pod_labels(build_deployment(f)))
    assert not selects(policy["spec"]["podSelector"], pod_labels(build_gateway_deployment(f)))
    assert peers_of(policy) == [
        {"podSelector": {"matchLabels": {"serves.scoring.fleet.dev/qwen": "true"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "scoring-system"}}},
        PROMETHEUS]
    # the gateway peer selects the gateways that route to the fleet (its own among them)
    assert selects(peers_of(policy)[0]["podSelector"], pod_labels(build_gateway_deployment(f)))
    # every rule names its peers (an empty `from` would admit everyone) and only the server's port
    assert all(rule["from"] and rule["ports"] == [{"protocol": "TCP", "port": 30000}]
               for rule in policy["spec"]["ingress"])


def test_an_operator_of_unknown_namespace_gets_no_rule():
    policy = build_network_policy(fleet(operator_namespace=None))
    assert peers_of(policy) == [{"podSelector": {"matchLabels": {"serves.scoring.fleet.dev/qwen": "true"}}}]


def test_the_gateway_admits_anyone_on_its_port_unless_told():
    policy = build_gateway_network_policy(fleet(gateway={"enabled": True, "port": 31080}))
    assert policy["metadata"]["name"] == "qwen-gateway"
    assert policy["spec"]["podSelector"] == {"matchLabels": {GATEWAY_LABEL: "qwen"}}
    assert policy["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": 31080}]}]


def test_the_gateway_admits_only_its_listed_peers_when_given():
    office = {"ipBlock": {"cidr": "10.20.0.0/16", "except": ["10.20.9.0/24"]}}
    policy = build_gateway_network_policy(fleet(gateway={"enabled": True},
                                                networkPolicy={"gatewayAllowFrom": [office, PROMETHEUS]}))
    operator = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "scoring-system"}}}
    # the operator's namespace too: the native autoscaler reads the gateway's demand from there
    assert policy["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": 30080}],
                                          "from": [office, PROMETHEUS, operator]}]


@pytest.mark.parametrize("enabled,gateway,built,removed", [
    (True, True, ["qwen", "qwen-gateway"], []),
    (True, False, ["qwen"], ["qwen-gateway"]),
    (False, True, [], ["qwen", "qwen-gateway"]),
    (False, False, [], ["qwen", "qwen-gateway"]),
], ids=["on-with-gateway", "on-without-gateway", "off-with-gateway", "off"])
def test_policies_are_built_when_enabled_and_removed_when_not(enabled, gateway, built, removed):
    f = fleet(gateway={"enabled": gateway}, networkPolicy={"enabled": enabled})
    assert [p["metadata"]["name"] for p in network_policies(f)] == built
    assert [c["metadata"]["name"] for c in build_children(f) if c["kind"] == "NetworkPolicy"] == built
    assert [name for _, kind, name in unwanted_children(f) if kind == "NetworkPolicy"] == removed


@pytest.mark.parametrize("peer,expected", [
    ({}, "must be a NetworkPolicyPeer"),
    ({"namespaces": ["monitoring"]}, "must be a NetworkPolicyPeer"),
    ({"podSelector": "app=x"}, "must be a label selector"),
    ({"ipBlock": {"except": ["10.0.0.0/8"]}}, "ipBlock.cidr is required"),
    ({"ipBlock": {"cidr": "10.0.0.0/8"}, **PROMETHEUS}, "cannot be combined"),
], ids=["empty", "unknown-key", "selector-not-object", "no-cidr", "ipblock-and-selector"])
def test_bad_peers_are_spec_errors(peer, expected):
    with pytest.raises(SpecError, match=expected):
        fleet(networkPolicy={"allowFrom": [peer]})


def test_every_child_of_a_fleet_with_every_access_field_is_a_valid_kubernetes_object():
    f = fleet(model={"cache": {"ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}}}},
                     "hfTokenSecretRef": {"name": "hf", "key": "token"}},
              auth={"apiKeySecretRef": API_KEY_REF}, gateway={"enabled": True},
              server={"startupTimeoutSeconds": 900},
              networkPolicy={"allowFrom": [PROMETHEUS], "gatewayAllowFrom": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]})
    for child in build_children(f):
        kubernetes_validate.validate(child, K8S_VERSION, strict=True)
