"""The chart's Grafana dashboards (monitoring.dashboards) and the gateways' PodMonitor
(monitoring.gatewayPodMonitor), through a real `helm install` into the Kubernetes API emulator."""
from __future__ import annotations

import json

from tests.packaging.dashboard_queries import DASHBOARDS
from tests.packaging.helm_tool import by_kind
from tests.packaging.test_chart_prometheus_rule import _serve_monitoring_api

ON = {"monitoring": {"dashboards": {"enabled": True}}}


def test_each_dashboard_is_a_configmap_labelled_for_grafanas_sidecar(render):
    (config_map,) = by_kind(render(ON), "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "scoring-system"
    (name, text), = config_map["data"].items()
    assert name == "scoringfleet.json"
    assert json.loads(text) == json.loads((DASHBOARDS / name).read_text())


def test_the_label_namespace_and_annotations_are_configurable(render):
    values = {"monitoring": {"dashboards": {
        "enabled": True, "label": "grafana.example/dashboard", "labelValue": "yes",
        "namespace": "monitoring", "annotations": {"grafana_folder": "ScoringFleet"}}}}
    (config_map,) = by_kind(render(values, namespaces=["monitoring"]), "ConfigMap")
    metadata = config_map["metadata"]
    assert metadata["labels"]["grafana.example/dashboard"] == "yes"
    assert "grafana_dashboard" not in metadata["labels"]
    assert metadata["namespace"] == "monitoring"
    assert metadata["annotations"] == {"grafana_folder": "ScoringFleet"}


def test_no_dashboard_by_default(render):
    assert by_kind(render({}), "ConfigMap") == []


def test_the_gateways_podmonitor_labels_them_gateway_never_fleet(render, api_create):
    _serve_monitoring_api(api_create)
    objects = render({"monitoring": {"gatewayPodMonitor": {"enabled": True}}})
    (monitor,) = by_kind(objects, "PodMonitor")
    assert monitor["spec"]["selector"]["matchExpressions"] == [
        {"key": "scoring.fleet.dev/gateway", "operator": "Exists"}]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "http" and endpoint["relabelings"] == [
        {"sourceLabels": ["__meta_kubernetes_pod_label_scoring_fleet_dev_gateway"],
         "targetLabel": "gateway"}]
