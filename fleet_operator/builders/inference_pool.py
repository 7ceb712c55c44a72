"""Pure: FleetSpec -> the fleet's InferencePool (inference.networking.k8s.io/v1), for Gateway API
inference routing (spec.inferencePool).

It selects the scoring pods by the fleet label alone: the Deployment's own selector, which every pod
keeps across rollouts (pod-template-hash changes; the gateway's pods never carry it). targetPorts is
the server's port; endpointPickerRef the named EPP Service. Fields the API server would default
(appProtocol, the ref's group and kind) are written out, so the live object never drifts from this.
"""
from __future__ import annotations

from typing import Any

from fleet_operator.names import fleet_labels, selector_labels
from fleet_operator.spec.fleet import FleetSpec

INFERENCE_API = "inference.networking.k8s.io/v1"
KIND = "InferencePool"
# The EPP reads this pod label to choose its metric mapping (llm-d's core-metrics-extractor,
# engineLabelKey's default); "sglang": sglang:num_queue_reqs, num_running_reqs, token_usage and
# cache_config_info{page_size, num_pages}, which the server exports.
ENGINE_TYPE_LABEL = "llm-d.ai/engine-type"
ENGINE_TYPE = "sglang"


def build_inference_pool(fleet: FleetSpec) -> dict[str, Any]:
    epp = fleet.inference_pool.endpoint_picker
    return {
        "apiVersion": INFERENCE_API,
        "kind": KIND,
        "metadata": {"name": fleet.name, "namespace": fleet.namespace, "labels": fleet_labels(fleet.name)},
        "spec": {
            "selector": {"matchLabels": selector_labels(fleet.name)},
            "targetPorts": [{"number": fleet.server.port}],
            "appProtocol": "http",
            "endpointPickerRef": {"group": "", "kind": "Service", "name": epp.name,
                                  "port": {"number": epp.port}, "failureMode": epp.failure_mode},
        },
    }
