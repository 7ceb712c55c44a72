"""Every pod the project ships meets the "restricted" Pod Security Standard, checked rule by rule by
one table (tests/reliability/pss.py): the fleet's Deployment and its gateway's built from each
examples/*.yaml, and the chart's operator Deployment. The checker itself is tested first: a
compliant pod passes, and each rule catches its own counterexample (and only that rule fails).

tests/fleet_operator/test_builders.py and tests/packaging/test_helm_install.py pin the exact fields;
this is the standard's view of the same objects.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import pytest

from fleet_operator.builders import build_deployment
from fleet_operator.builders.gateway import build_gateway_deployment
from fleet_operator.context import OperatorConfig
from fleet_operator.spec.fleet import parse_fleet
from tests.fleet_operator.crd_schema import EXAMPLES, load_yaml
from tests.packaging.helm_tool import by_kind
from tests.reliability.pss import RULES, violations

SAFE = {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]}}
COMPLIANT = {
    "securityContext": {"runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [{"name": "main", "image": "x", "securityContext": dict(SAFE),
                    "ports": [{"containerPort": 80}], "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],
    "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "token", "projected": {"sources": []}}],
}


def _main(pod: dict) -> dict:
    return pod["containers"][0]["securityContext"]


BREAKS: dict[str, Callable[[dict], object]] = {  # rule -> a change that breaks only that rule
    "host-namespaces": lambda pod: pod.update(hostPID=True),
    "privileged": lambda pod: _main(pod).update(privileged=True),
    "host-path": lambda pod: pod["volumes"].append({"name": "logs", "hostPath": {"path": "/var/log"}}),
    "host-ports": lambda pod: pod["containers"][0]["ports"][0].update(hostPort=80),
    "proc-mount": lambda pod: _main(pod).update(procMount="Unmasked"),
    "selinux": lambda pod: pod["securityContext"].update(seLinuxOptions={"user": "root"}),
    "apparmor": lambda pod: _main(pod).update(appArmorProfile={"type": "Unconfined"}),
    "sysctls": lambda pod: pod["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
    "volume-types": lambda pod: pod["volumes"].append({"name": "git", "gitRepo": {"repository": "x"}}),
    "privilege-escalation": lambda pod: _main(pod).pop("allowPrivilegeEscalation"),
    "run-as-non-root": lambda pod: _main(pod).update(runAsNonRoot=False),
    "run-as-user": lambda pod: _main(pod).update(runAsUser=0),
    "seccomp": lambda pod: _main(pod).update(seccompProfile={"type": "Unconfined"}),
    "capabilities": lambda pod: _main(pod).update(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}),
    "read-only-root": lambda pod: _main(pod).update(readOnlyRootFilesystem=False),
}


def test_every_rule_has_a_counterexample():
    assert set(BREAKS) == set(RULES)


def test_a_compliant_pod_passes():
    assert violations(COMPLIANT) == {}


# hostPath breaks baseline's own rule and is also outside restricted's list of volume types.
ALSO_BROKEN = {"host-path": {"volume-types"}}


@pytest.mark.parametrize("rule", BREAKS, ids=BREAKS)
def test_each_rule_catches_its_counterexample(rule):
    pod = copy.deepcopy(COMPLIANT)
    BREAKS[rule](pod)
    assert set(violations(pod)) == {rule} | ALSO_BROKEN.get(rule, set()), violations(pod)


ALSO_ALLOWED = {  # what the standard permits, and the checker must too
    "net-bind-service": lambda pod: _main(pod).update(capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}),
    "localhost-seccomp": lambda pod: pod["securityContext"].update(
        seccompProfile={"type": "Localhost", "localhostProfile": "p.json"}),
    "non-root-on-the-pod": lambda pod: (pod["securityContext"].update(runAsNonRoot=True),
                                        _main(pod).pop("runAsNonRoot")),
    "read-only-config-mount": lambda pod: (pod["volumes"].append({"name": "cfg", "configMap": {"name": "c"}}),
                                           pod["containers"][0]["volumeMounts"].append(
                                               {"name": "cfg", "mountPath": "/etc/c", "readOnly": True})),
}


@pytest.mark.parametrize("change", ALSO_ALLOWED.values(), ids=ALSO_ALLOWED)
def test_what_the_standard_allows_passes(change):
    pod = copy.deepcopy(COMPLIANT)
    change(pod)
    assert violations(pod) == {}


def _pod_of(deployment: dict) -> dict:
    return deployment["spec"]["template"]["spec"]


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_fleet_pods_of_every_example_are_restricted(example: Path):
    doc = load_yaml(example)
    fleet = parse_fleet(doc["metadata"]["name"], "default", doc["spec"], OperatorConfig(default_image="img:1"))
    assert violations(_pod_of(build_deployment(fleet))) == {}


def test_only_the_model_cache_may_be_a_writable_non_emptydir_mount():
    pod = copy.deepcopy(COMPLIANT)
    pod["volumes"].append({"name": "model-cache", "persistentVolumeClaim": {"claimName": "hf"}})
    pod["containers"][0]["volumeMounts"].append({"name": "model-cache", "mountPath": "/cache/huggingface"})
    assert violations(pod) == {}
    pod["volumes"][-1]["name"] = pod["containers"][0]["volumeMounts"][-1]["name"] = "data"
    assert set(violations(pod)) == {"read-only-root"}


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_gateway_pods_of_every_example_are_restricted(example: Path):
    doc = load_yaml(example)
    doc["spec"]["gateway"] = {**doc["spec"].get("gateway", {}), "enabled": True}
    fleet = parse_fleet(doc["metadata"]["name"], "default", doc["spec"], OperatorConfig(default_image="img:1"))
    assert violations(_pod_of(build_gateway_deployment(fleet))) == {}


def test_the_charts_operator_pod_is_restricted(render):
    (deployment,) = by_kind(render({}), "Deployment")
    assert violations(_pod_of(deployment)) == {}
