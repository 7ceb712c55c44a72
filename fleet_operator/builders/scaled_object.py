"""Pure: FleetSpec -> the KEDA ScaledObject of keda mode, through ScaledObjectParams (plain values).

The ScaledObject scales the ScoringFleet itself through its scale subresource. Its one trigger reads
the fleet's `scoringfleet:load:sum` from Prometheus (the chart's recording rules, absent while any pod
of the fleet is not counted) with ignoreNullValues "false": a degraded fleet is an error for KEDA,
never 0. The HPA KEDA makes then keeps its size; after `fallback_failures` failed reads KEDA's
fallback holds the current replicas (never fewer than min_replicas).
"""
from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleet_operator.builders.hpa import hpa_behavior
from fleet_operator.context import is_http_url
from fleet_operator.names import API_VERSION as FLEET_API_VERSION, KIND as FLEET_KIND, fleet_labels
from fleet_operator.spec.fleet import FleetSpec

API_VERSION = "keda.sh/v1alpha1"
KIND = "ScaledObject"
LOAD_METRIC = "scoringfleet:load:sum"  # charts/scoring-fleet/files/prometheus-rules.yaml
TRIGGER_NAME = "fleet-load"
# Hold the size the fleet has when reads fail (KEDA >= 2.17): `replicas` only if that is higher.
FALLBACK_BEHAVIOR = "currentReplicasIfHigher"


@dataclass(frozen=True)
class ScaledObjectParams:
    """Everything a keda-mode fleet's ScaledObject is made of; each value checked here on its own.

    name, namespace: the ScoringFleet's (the ScaledObject takes its name and namespace).
    min_replicas, max_replicas: as parsed, which holds the spec's cross-field rules (min >= 1 in
    keda mode: a fleet at 0 pods has no load series, which this trigger reads as an error, so it
    could never wake; min <= max): spec/autoscaling.py checks them, once; not again here.
    target_load_per_replica > 0: running + queued sequences per pod (the trigger's AverageValue).
    prometheus_address: base URL of the Prometheus (or compatible query API) evaluating the rules.
    behavior: an autoscaling/v2 HPA `behavior` ({"scaleUp": ..., "scaleDown": ...}), or None for
    the HPA's defaults. fallback_failures >= 0: failed reads before the fallback applies.
    authentication_ref: a TriggerAuthentication, for a Prometheus that wants credentials.
    """

    name: str
    namespace: str
    min_replicas: int
    max_replicas: int
    target_load_per_replica: float
    prometheus_address: str
    behavior: Mapping[str, Any] | None = None
    fallback_failures: int = 3
    authentication_ref: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problem = _problem(self)
        if problem:
            raise ValueError(f"keda mode: {problem}")


def _problem(p: ScaledObjectParams) -> str | None:
    if not p.name or not p.namespace:
        return "name and namespace are required"
    if not (math.isfinite(p.target_load_per_replica) and p.target_load_per_replica > 0):
        return f"targetLoadPerReplica must be > 0 (got {p.target_load_per_replica})"
    if not is_http_url(p.prometheus_address):
        return (f"the Prometheus address must be an http(s) URL (got "
                f"{p.prometheus_address!r}); set the operator's default or the fleet's own")
    if p.fallback_failures < 0:
        return f"fallback failures must be >= 0 (got {p.fallback_failures})"
    return None


def scaled_object_params(fleet: FleetSpec) -> ScaledObjectParams:
    """A keda-mode fleet's ScaledObject parameters: min/max/target, behavior, trigger settings, labels.

    Trusts the parsed spec: the parser has required an http(s) address, minReplicas >= 1 in keda
    mode and min <= max, so this raises ValueError only on a FleetSpec built by hand.
    """
    a = fleet.autoscaling
    return ScaledObjectParams(
        name=fleet.name, namespace=fleet.namespace, min_replicas=a.min_replicas,
        max_replicas=a.max_replicas, target_load_per_replica=a.target_load_per_replica,
        prometheus_address=a.keda.prometheus_address or "", behavior=hpa_behavior(a),
        authentication_ref=a.keda.authentication_ref, labels=fleet_labels(fleet.name))


def load_query(namespace: str, name: str) -> str:
    """The PromQL the trigger sends: one fleet's recorded load, one series or none."""
    return f'{LOAD_METRIC}{{namespace="{namespace}",fleet="{name}"}}'


def format_threshold(value: float) -> str:
    """KEDA's metadata values are strings: 32.0 -> "32", 0.5 -> "0.5"."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def build_scaled_object(params: ScaledObjectParams) -> dict[str, Any]:
    """The ScaledObject (keda.sh/v1alpha1) for one fleet; owner references are the caller's."""
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": FLEET_API_VERSION, "kind": FLEET_KIND,
                           "name": params.name},
        "minReplicaCount": params.min_replicas,
        "maxReplicaCount": params.max_replicas,
        "fallback": {"failureThreshold": params.fallback_failures,
                     "replicas": params.min_replicas, "behavior": FALLBACK_BEHAVIOR},
        "triggers": [_prometheus_trigger(params)],
    }
    if params.behavior is not None:
        spec["advanced"] = {"horizontalPodAutoscalerConfig": {
            "behavior": copy.deepcopy(dict(params.behavior))}}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": params.name, "namespace": params.namespace,
                     "labels": dict(params.labels)},
        "spec": spec,
    }


def _prometheus_trigger(params: ScaledObjectParams) -> dict[str, Any]:
    trigger: dict[str, Any] = {
        "type": "prometheus",
        "name": TRIGGER_NAME,
        # The fleet's total divided by its replicas against the per-pod target (fallback needs it).
        "metricType": "AverageValue",
        "metadata": {
            "serverAddress": params.prometheus_address,
            "query": load_query(params.namespace, params.name),
            "threshold": format_threshold(params.target_load_per_replica),
            # An empty answer (fleet degraded, or Prometheus lost it) is an error, not 0 (KEDA #3065).
            "ignoreNullValues": "false",
        },
    }
    if params.authentication_ref:
        trigger["authenticationRef"] = {"name": params.authentication_ref,
                                        "kind": "TriggerAuthentication"}
    return trigger
