"""Test helper: the CRD's structural openAPIV3Schema as a JSON-schema validator, plus its CEL rule.

No API server validates custom resources here (the emulator does not), so the tests do: the
Kubernetes extensions (x-kubernetes-int-or-string, ...) are turned into plain JSON schema, and the
CEL rules (minReplicas <= maxReplicas; keda mode needs minReplicas >= 1; minReplicas 0 only in
native mode; gateway.fleets only with the gateway) are checked by hand.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "scoringfleet.yaml"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
# The messages of spec.autoscaling's CEL rules, in the CRD's order (test_crd ties them to the CRD).
CEL_MESSAGES = ("autoscaling.minReplicas must be <= autoscaling.maxReplicas",
                "keda mode needs autoscaling.minReplicas >= 1 (a fleet at 0 pods has no load series to wake it)")
ROLLOUT_CEL_MESSAGE = ("rollout.maxSurge and rollout.maxUnavailable cannot both be 0 (the rollout could "
                       "never replace a pod)")
_PERCENT = re.compile(r"^[0-9]+%$")
_PERCENT_TO_100 = re.compile(r"^([0-9]|[1-9][0-9]|100)%$")


def load_crd() -> dict[str, Any]:
    return yaml.safe_load(CRD_PATH.read_text())


def load_yaml(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def to_json_schema(node: Any) -> Any:
    """Structural schema -> draft-4 JSON schema (OpenAPI v3.0 uses boolean exclusiveMinimum)."""
    if isinstance(node, list):
        return [to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: to_json_schema(v) for k, v in node.items()
           if not k.startswith("x-kubernetes-") and k != "default"}
    if node.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("x-kubernetes-list-type") == "set":  # the API server refuses a set with repeats
        out["uniqueItems"] = True
    if node.get("type") == "object" and "properties" in node \
            and not node.get("x-kubernetes-preserve-unknown-fields") \
            and "additionalProperties" not in node:
        out["additionalProperties"] = False  # structural schemas prune unknown fields: flag them
    if "properties" in out:  # property names are data, not schema keywords: keep them all
        out["properties"] = {k: to_json_schema(v) for k, v in node["properties"].items()}
    return out


def validator() -> jsonschema.Draft4Validator:
    version = load_crd()["spec"]["versions"][0]
    schema = to_json_schema(version["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft4Validator(schema)


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """Every schema violation, plus the CEL rule, as messages (empty: valid)."""
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator().iter_errors(obj)]
    autoscaling = (obj.get("spec") or {}).get("autoscaling") or {}
    low, high = autoscaling.get("minReplicas", 1), autoscaling.get("maxReplicas", 8)
    if isinstance(low, int) and isinstance(high, int) and low > high:
        errors.append(f"spec.autoscaling: {CEL_MESSAGES[0]}")
    if autoscaling.get("mode", "native") == "keda" and isinstance(low, int) and low < 1:
        errors.append(f"spec.autoscaling: {CEL_MESSAGES[1]}")
    gateway = (obj.get("spec") or {}).get("gateway") or {}
    if low == 0 and autoscaling.get("mode", "native") != "native":
        errors.append("spec: autoscaling.minReplicas 0 needs autoscaling.mode native")
    if gateway.get("fleets") and gateway.get("enabled") is not True:
        errors.append("spec: gateway.fleets needs gateway.enabled")
    pool = (obj.get("spec") or {}).get("inferencePool") or {}
    if pool.get("enabled") is True and "name" not in (pool.get("endpointPicker") or {}):
        errors.append("spec.inferencePool: inferencePool.enabled needs endpointPicker.name (the Endpoint "
                      "Picker's Service)")
    return errors + _rollout_errors((obj.get("spec") or {}).get("rollout") or {})


def _rollout_errors(rollout: dict[str, Any]) -> list[str]:
    """spec.rollout's three CEL rules: each field an integer >= 0 or a percentage (maxUnavailable's
    at most 100%), and not both 0."""
    errors = []
    for key, percent in (("maxSurge", _PERCENT), ("maxUnavailable", _PERCENT_TO_100)):
        value = rollout.get(key)
        if value is not None and not (value >= 0 if isinstance(value, int) else
                                      isinstance(value, str) and percent.match(value)):
            errors.append(f"spec.rollout.{key}: must be an integer >= 0 or a percentage")

    def zero(value: Any) -> bool:
        return value == 0 or isinstance(value, str) and re.match(r"^0+%$", value) is not None

    if "maxSurge" in rollout and zero(rollout["maxSurge"]) and zero(rollout.get("maxUnavailable", 0)):
        errors.append(f"spec.rollout: {ROLLOUT_CEL_MESSAGE}")
    return errors
