"""Pure: FleetSpec -> the autoscaling/v2 HPA of hpa mode, whose target is the ScoringFleet itself.

The HPA reads the adapter-renamed series sglang_load (running + waiting per pod) and writes the
fleet's scale subresource; its behavior is spec.autoscaling's scaleUp / scaleDown as given
(hpa_behavior, which keda mode's ScaledObject carries too).
"""
from __future__ import annotations

from typing import Any

from fleet_operator.names import API_VERSION, KIND, fleet_labels
from fleet_operator.spec.autoscaling import AutoscalingSpec, ScalingRules
from fleet_operator.spec.fleet import FleetSpec

# Adapter-renamed series (Prometheus names cannot carry ':' through the custom metrics API):
# running + waiting sequences per pod, see docs/operator.md for the adapter rule.
HPA_METRIC = "sglang_load"


def build_hpa(fleet: FleetSpec) -> dict[str, Any]:
    """autoscaling/v2 HPA (hpa mode) that scales the ScoringFleet itself through its scale subresource."""
    a = fleet.autoscaling
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": fleet.name, "namespace": fleet.namespace,
                     "labels": fleet_labels(fleet.name)},
        "spec": {
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": KIND, "name": fleet.name},
            "minReplicas": a.min_replicas,
            "maxReplicas": a.max_replicas,
            "metrics": [{
                "type": "Pods",
                "pods": {"metric": {"name": HPA_METRIC},
                         "target": {"type": "AverageValue",
                                    "averageValue": format_quantity(a.target_load_per_replica)}},
            }],
            "behavior": hpa_behavior(a),
        },
    }


def hpa_behavior(autoscaling: AutoscalingSpec) -> dict[str, Any]:
    """The autoscaling/v2 HPA `behavior` of spec.autoscaling's scaleUp / scaleDown (hpa and keda mode)."""
    return {"scaleUp": _hpa_rules(autoscaling.scale_up), "scaleDown": _hpa_rules(autoscaling.scale_down)}


def _hpa_rules(rules: ScalingRules) -> dict[str, Any]:
    return {
        "stabilizationWindowSeconds": rules.stabilization_window_s,
        "selectPolicy": rules.select_policy,
        "policies": [{"type": p.type, "value": p.value, "periodSeconds": p.period_s}
                     for p in rules.policies],
    }


def format_quantity(value: float) -> str:
    """A non-negative number as a Kubernetes quantity: 32 -> "32", 0.5 -> "500m"."""
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"
