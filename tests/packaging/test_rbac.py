"""The operator's permissions, pinned: exactly these grants, nothing more (least privilege).

The emulator does not enforce RBAC, so these tests are the check: a new API call in the operator
needs a new line here and in templates/_helpers.tpl, on purpose.
"""
from __future__ import annotations

import pytest

from tests.packaging.helm_tool import by_kind

READ = frozenset({"get", "list", "watch"})

CREATE_GET_PATCH = frozenset({"create", "get", "patch"})

# What the operator does in each namespace it serves (tests/reliability/test_rbac_used.py checks
# these against the requests a real operator sends).
NAMESPACED_GRANTS = {
    ("scoring.fleet.dev", "scoringfleets"): READ | {"patch"},  # never create/replace/delete fleets
    ("scoring.fleet.dev", "scoringfleets/status"): frozenset({"patch"}),
    ("scoring.fleet.dev", "scoringfleets/scale"): frozenset({"patch"}),
    ("scoring.fleet.dev", "scoringfleets/finalizers"): frozenset({"update"}),  # blockOwnerDeletion
    # watched for drift; GC deletes them with the fleet, the operator the gateway's when disabled
    ("apps", "deployments"): READ | {"create", "patch", "delete"},
    ("", "services"): CREATE_GET_PATCH | {"delete"},
    ("", "serviceaccounts"): CREATE_GET_PATCH | {"delete"},  # the gateway's
    ("rbac.authorization.k8s.io", "roles"): CREATE_GET_PATCH | {"delete"},  # the gateway's: read pods
    ("rbac.authorization.k8s.io", "rolebindings"): CREATE_GET_PATCH | {"delete"},
    ("policy", "poddisruptionbudgets"): CREATE_GET_PATCH,
    ("autoscaling", "horizontalpodautoscalers"): CREATE_GET_PATCH | {"delete"},  # leaving hpa mode
    # each fleet's and its gateway's; deleted when disabled (or the gateway is)
    ("networking.k8s.io", "networkpolicies"): CREATE_GET_PATCH | {"delete"},
    ("keda.sh", "scaledobjects"): CREATE_GET_PATCH | {"delete"},  # keda mode; leaving it
    ("inference.networking.k8s.io", "inferencepools"): CREATE_GET_PATCH | {"delete"},  # spec.inferencePool
    # listed by label and scraped; patched: pod-deletion-cost before a scale-down; get and watch:
    # the gateway's Role grants them
    ("", "pods"): READ | {"patch"},
    ("", "events"): frozenset({"create"}),
}
# What kopf needs cluster-wide in every mode.
CLUSTER_GRANTS = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): frozenset({"list", "watch"}),
}
# kopf's peering between the operator's replicas (tests/reliability/test_operator_ha.py checks them
# against the requests two replicas send): the ClusterKopfPeering with all namespaces, a KopfPeering
# in each watched namespace; created by the first replica, keep-alives merge-patched, the leader
# annotates it.
PEERING_VERBS = READ | {"create", "patch"}
CLUSTER_PEERING_GRANTS = {("kopf.dev", "clusterkopfpeerings"): PEERING_VERBS}
NAMESPACED_PEERING_GRANTS = {("kopf.dev", "kopfpeerings"): PEERING_VERBS}
# Granted but not exercised by test_rbac_used's run, each for a reason.
GRANTED_FOR_PATHS_NOT_RUN = {
    ("scoring.fleet.dev", "scoringfleets/finalizers", "update"):
        "admission (OwnerReferencesPermissionEnforcement) checks it for blockOwnerDeletion",
    ("", "services", "patch"): "a drifted Service is patched back",
    ("policy", "poddisruptionbudgets", "patch"): "a drifted PDB is patched back",
    ("autoscaling", "horizontalpodautoscalers", "patch"): "a drifted or re-specified HPA is patched",
    ("", "pods", "get"): "RBAC escalation: the gateway's Role grants it, so its creator must hold it",
    ("", "pods", "watch"): "RBAC escalation: the gateway's Role grants it, so its creator must hold it",
    ("", "serviceaccounts", "patch"): "a drifted ServiceAccount (labels) is patched back",
    ("rbac.authorization.k8s.io", "roles", "patch"): "a drifted gateway Role is patched back",
    ("rbac.authorization.k8s.io", "rolebindings", "patch"): "a drifted gateway RoleBinding is patched",
    ("networking.k8s.io", "networkpolicies", "patch"): "a drifted NetworkPolicy is patched back",
    ("inference.networking.k8s.io", "inferencepools", "patch"): "a drifted InferencePool is patched back",
}


def grants(rules: list[dict]) -> dict[tuple[str, str], frozenset[str]]:
    """(apiGroup, resource) -> verbs; fails on the forms this chart must never use."""
    table: dict[tuple[str, str], frozenset[str]] = {}
    for rule in rules:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                verbs = frozenset(rule["verbs"])
                assert "*" not in verbs | {group, resource}, rule
                table[(group, resource)] = table.get((group, resource), frozenset()) | verbs
    return table


def _only(objects: list[dict], kind: str) -> dict:
    (obj,) = by_kind(objects, kind)
    return obj


def test_all_namespaces_grants_exactly_the_fleet_rules_cluster_wide(render):
    objects = render({})
    assert grants(_only(objects, "ClusterRole")["rules"]) == {**NAMESPACED_GRANTS, **CLUSTER_GRANTS,
                                                               **CLUSTER_PEERING_GRANTS}
    assert by_kind(objects, "Role") == [] and by_kind(objects, "RoleBinding") == []
    binding = _only(objects, "ClusterRoleBinding")
    account = _only(objects, "ServiceAccount")["metadata"]
    assert binding["roleRef"]["name"] == _only(objects, "ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["name"],
                                    "namespace": account["namespace"]}]


def test_watched_namespaces_get_a_role_each_and_the_cluster_role_only_reads_crds(render):
    objects = render({"watchNamespaces": ["team-a", "team-b"]}, namespaces=["team-a", "team-b"])
    assert grants(_only(objects, "ClusterRole")["rules"]) == CLUSTER_GRANTS
    roles = by_kind(objects, "Role")
    assert sorted(role["metadata"]["namespace"] for role in roles) == ["team-a", "team-b"]
    assert all(grants(role["rules"]) == {**NAMESPACED_GRANTS, **NAMESPACED_PEERING_GRANTS} for role in roles)
    bindings = by_kind(objects, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    # Each binding grants the operator's account, which lives in the release namespace.
    assert {b["subjects"][0]["namespace"] for b in bindings} == {"scoring-system"}


@pytest.mark.parametrize(
    "values",
    [{"rbac": {"create": False}}, {"rbac": {"create": False}, "watchNamespaces": ["team-a"]}],
    ids=["cluster-wide", "namespaced"],
)
def test_rbac_create_false_renders_no_rbac(render, values):
    objects = render(values, namespaces=values.get("watchNamespaces", []))
    rbac_kinds = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    assert {obj["kind"] for obj in objects} & rbac_kinds == set()
    assert by_kind(objects, "Deployment") != []  # the rest of the chart still renders


def test_the_operator_holds_every_right_it_grants_the_gateway(render):
    # Kubernetes' RBAC escalation rule: a Role (and its binding) may only be created by one who
    # holds every right it grants (or `escalate` / `bind`, which the operator is not given).
    from fleet_operator.builders.gateway_rbac import build_gateway_role
    from fleet_operator.spec.fleet import parse_fleet

    fleet = parse_fleet("f", "team-a", {"model": {"source": "m"}, "image": "i",
                                        "gateway": {"enabled": True}})
    operator = grants(_only(render({}), "ClusterRole")["rules"])
    for (group, resource), verbs in grants(build_gateway_role(fleet)["rules"]).items():
        assert verbs <= operator.get((group, resource), frozenset()), (group, resource, verbs)
    assert not {v for verbs in operator.values() for v in verbs} & {"escalate", "bind"}
