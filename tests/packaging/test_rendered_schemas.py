"""Every object the chart renders validates against the Kubernetes JSON schemas (kubernetes-validate,
strict: unknown fields fail), for the chart's lowest supported Kubernetes and the newest bundled; the
sample ScoringFleet against its CRD's schema (the emulator does no schema validation itself).
"""
from __future__ import annotations

import kubernetes_validate
import pytest

from tests.fleet_operator.crd_schema import schema_errors  # the CRD's schema + CEL rule, as a validator
from tests.packaging.helm_tool import by_kind

# Chart.yaml's kubeVersion floor and the newest schemas kubernetes-validate ships.
KUBE_VERSIONS = ["1.25.0", "1.37.0"]

VALUE_SETS = {
    "defaults": {},
    "namespaced": {"watchNamespaces": ["team-a"]},
    "everything-on": {"sampleFleet": {"enabled": True}, "operator": {"logLevel": "debug",
                      "extraEnv": [{"name": "TZ", "value": "UTC"}], "priorityClassName": "high"},
                      "imagePullSecrets": [{"name": "regcred"}], "additionalLabels": {"team": "ml"},
                      "nodeSelector": {"kubernetes.io/os": "linux"},
                      "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                      "serviceAccount": {"annotations": {"example.com/role": "operator"}},
                      "keda": {"prometheusAddress": "http://prometheus-operated.monitoring.svc:9090"}},
    "no-crd-no-rbac": {"crds": {"install": False}, "rbac": {"create": False}},
}


@pytest.mark.parametrize("values", list(VALUE_SETS.values()), ids=list(VALUE_SETS))
def test_rendered_objects_validate_against_the_kubernetes_schemas(render, values):
    objects = render(values, namespaces=values.get("watchNamespaces", []))
    checked = [obj for obj in objects if obj["kind"] not in ("CustomResourceDefinition",
                                                            "ScoringFleet")]
    assert by_kind(checked, "Deployment")
    for obj in checked:
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
    for fleet in by_kind(objects, "ScoringFleet"):
        assert schema_errors(fleet) == []


@pytest.mark.parametrize("version", KUBE_VERSIONS)
def test_rendered_crd_validates_against_the_kubernetes_schema(render, version):
    crds = by_kind(render({}), "CustomResourceDefinition")  # ScoringFleet's, kopf's two peering ones
    assert len(crds) == 3
    for crd in crds:
        kubernetes_validate.validate(crd, version, strict=True)
