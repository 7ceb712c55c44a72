"""The chart's PrometheusRule (monitoring.prometheusRule) and the monitors' `fleet` label, through a
real `helm install` into the Kubernetes API emulator."""
from __future__ import annotations

import yaml

from tests.packaging.helm_tool import CHART, by_kind

RULES_ON = {"monitoring": {"prometheusRule": {"enabled": True, "labels": {"release": "kps"}},
                           "podMonitor": {"enabled": True},
                           "serviceMonitor": {"enabled": True}}}
FLEET_LABEL = {"sourceLabels": ["__meta_kubernetes_pod_label_scoring_fleet_dev_fleet"],
               "targetLabel": "fleet"}


def _serve_monitoring_api(api_create) -> None:
    """Minimal stand-ins for the Prometheus Operator's CRDs: enough for the API to serve the kinds."""
    for kind in ("PodMonitor", "ServiceMonitor", "PrometheusRule"):
        plural = kind.lower() + "s"
        api_create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com"},
            "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(),
                               "listKind": kind + "List"},
                     "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                         "openAPIV3Schema": {"type": "object",
                                             "x-kubernetes-preserve-unknown-fields": True}}}]}})


def test_prometheus_rule_embeds_the_rule_file_unchanged(render, api_create):
    _serve_monitoring_api(api_create)
    (rule,) = by_kind(render(RULES_ON), "PrometheusRule")
    shipped = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    assert rule["spec"] == {"groups": shipped["groups"]}
    assert rule["metadata"]["labels"]["release"] == "kps"
    records = {r["record"] for group in shipped["groups"] for r in group["rules"]}
    assert {"scoringfleet:load:sum", "scoringfleet:pod_load:sum"} <= records


def test_monitors_map_the_fleet_pod_label_to_fleet(render, api_create):
    _serve_monitoring_api(api_create)
    objects = render(RULES_ON)
    (pod_monitor,) = by_kind(objects, "PodMonitor")
    (service_monitor,) = by_kind(objects, "ServiceMonitor")
    assert pod_monitor["spec"]["podMetricsEndpoints"][0]["relabelings"] == [FLEET_LABEL]
    assert service_monitor["spec"]["endpoints"][0]["relabelings"] == [FLEET_LABEL]


def test_prometheus_rule_is_off_by_default(render, api_create):
    _serve_monitoring_api(api_create)
    assert by_kind(render({}), "PrometheusRule") == []


def test_prometheus_rule_is_skipped_with_a_warning_without_the_monitoring_api(render_release):
    release = render_release({"monitoring": {"prometheusRule": {"enabled": True}}})
    assert by_kind(release.objects, "PrometheusRule") == []
    assert "does not serve monitoring.coreos.com/v1" in release.notes
