"""A ScoringFleet's spec as one frozen FleetSpec, defaults applied, or a SpecError saying why not.

Owns the defaults (they mirror crds/scoringfleet.yaml) and the checks the API server cannot do for us:
names too long for the children, quantities, an image for GPU fleets, min <= max (the CRD's CEL rule,
repeated because not every API server runs it). Pure: no Kubernetes calls, no clock.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.utils import parse_quantity

from fleet_operator.autoscaling_spec import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    AutoscalingSpec,
    ScalingPolicy,
    ScalingRules,
)

DTYPES = ("auto", "float32", "bfloat16", "float16")
MODES = ("native", "hpa")
SELECT_POLICIES = ("Max", "Min", "Disabled")
POLICY_TYPES = ("Pods", "Percent")
# Children (Service above all) are named after the fleet: a DNS-1035 label of at most 63 characters.
MAX_NAME_LEN = 63
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


class SpecError(ValueError):
    """The spec cannot be honoured; the message is for the user (it ends up in a condition)."""


@dataclass(frozen=True)
class ModelSpec:
    source: str  # hub id, path or .gguf file: the server's --model-path
    served_name: str
    dtype: str = "auto"


@dataclass(frozen=True)
class ResourceSpec:
    gpus: int = 1
    cpu: str = "4"
    memory: str = "16Gi"


@dataclass(frozen=True)
class ServerSpec:
    port: int = 30000
    max_running_requests: int = 256
    max_prefill_tokens: int | None = None  # None: the server picks by device
    max_total_tokens: int = 65536
    max_queued_requests: int = 1024
    request_timeout_s: int = 60


@dataclass(frozen=True)
class FleetSpec:
    """Everything the builders need, for one fleet. Dict-valued fields are never mutated."""

    name: str
    namespace: str
    model: ModelSpec
    image: str
    replicas: int = 1
    resources: ResourceSpec = ResourceSpec()
    server: ServerSpec = ServerSpec()
    autoscaling: AutoscalingSpec = AutoscalingSpec()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] = field(default_factory=dict)
    env: tuple[Mapping[str, Any], ...] = ()


def parse_fleet(name: str, namespace: str, spec: Mapping[str, Any] | None,
                default_image: str | None = None) -> FleetSpec:
    """CR metadata.name, metadata.namespace and spec -> FleetSpec, or SpecError.

    default_image is the operator's own image (one image serves both); used only for CPU fleets,
    because nothing says it was built with CUDA.
    """
    _check_name(name)
    spec = _obj(spec, "spec")
    model = _parse_model(_obj(spec.get("model"), "spec.model", required=True), name)
    resources = _parse_resources(_obj(spec.get("resources"), "spec.resources"))
    return FleetSpec(
        name=name,
        namespace=namespace,
        model=model,
        image=_image(spec, resources, default_image),
        replicas=_int(spec, "replicas", "spec", 1, minimum=0),
        resources=resources,
        server=_parse_server(_obj(spec.get("server"), "spec.server")),
        autoscaling=parse_autoscaling(spec.get("autoscaling")),
        node_selector=_string_map(spec.get("nodeSelector"), "spec.nodeSelector"),
        tolerations=_list_of_objects(spec.get("tolerations"), "spec.tolerations"),
        affinity=_obj(spec.get("affinity"), "spec.affinity"),
        env=_parse_env(spec.get("env")),
    )


def _check_name(name: str) -> None:
    if len(name) > MAX_NAME_LEN:
        raise SpecError(f"metadata.name {name!r} is {len(name)} characters; children are named after "
                        f"the fleet and a Service name allows at most {MAX_NAME_LEN}")
    if not _DNS_1035.match(name):
        raise SpecError(f"metadata.name {name!r} must be a DNS-1035 label (lowercase letters, digits "
                        f"and '-', starting with a letter): the fleet's Service takes this name")


def _image(spec: Mapping[str, Any], resources: ResourceSpec, default_image: str | None) -> str:
    image = _str(spec, "image", "spec", None)
    if image:
        return image
    if resources.gpus > 0:
        raise SpecError("spec.image is required when resources.gpus > 0 (the operator's default "
                        "image is not known to be a CUDA build)")
    if not default_image:
        raise SpecError("spec.image is required: the operator has no default image configured")
    return default_image


def _parse_model(model: Mapping[str, Any], fleet_name: str) -> ModelSpec:
    source = _str(model, "source", "spec.model", None)
    if not source:
        raise SpecError("spec.model.source is required (a hub id, a path or a .gguf file)")
    return ModelSpec(
        source=source,
        served_name=_str(model, "name", "spec.model", None) or fleet_name,
        dtype=_enum(model, "dtype", "spec.model", "auto", DTYPES),
    )


def _parse_resources(res: Mapping[str, Any]) -> ResourceSpec:
    return ResourceSpec(
        gpus=_int(res, "gpus", "spec.resources", 1, minimum=0),
        cpu=_quantity(res, "cpu", "spec.resources", "4"),
        memory=_quantity(res, "memory", "spec.resources", "16Gi"),
    )


def _parse_server(srv: Mapping[str, Any]) -> ServerSpec:
    path = "spec.server"
    port = _int(srv, "port", path, 30000, minimum=1)
    if port > 65535:
        raise SpecError(f"{path}.port must be <= 65535, got {port}")
    return ServerSpec(
        port=port,
        max_running_requests=_int(srv, "maxRunningRequests", path, 256, minimum=1),
        max_prefill_tokens=(_int(srv, "maxPrefillTokens", path, None, minimum=1)
                            if srv.get("maxPrefillTokens") is not None else None),
        max_total_tokens=_int(srv, "maxTotalTokens", path, 65536, minimum=1),
        max_queued_requests=_int(srv, "maxQueuedRequests", path, 1024, minimum=1),
        request_timeout_s=_int(srv, "requestTimeoutSeconds", path, 60, minimum=1),
    )


def parse_autoscaling(autoscaling: Mapping[str, Any] | None,
                      path: str = "spec.autoscaling") -> AutoscalingSpec:
    """spec.autoscaling (camelCase, as in the CRD) -> AutoscalingSpec with defaults, or SpecError.

    Public for the replay tool, whose traces carry the same mapping; `path` prefixes error messages.
    """
    a = _obj(autoscaling, path)
    defaults = AutoscalingSpec()
    min_replicas = _int(a, "minReplicas", path, defaults.min_replicas, minimum=1)
    max_replicas = _int(a, "maxReplicas", path, defaults.max_replicas, minimum=1)
    if min_replicas > max_replicas:
        raise SpecError(f"{path}.minReplicas ({min_replicas}) must be <= maxReplicas ({max_replicas})")
    target = _number(a, "targetLoadPerReplica", path, defaults.target_load_per_replica)
    if target <= 0:
        raise SpecError(f"{path}.targetLoadPerReplica must be > 0, got {target}")
    return AutoscalingSpec(
        enabled=_bool(a, "enabled", path, defaults.enabled),
        mode=_enum(a, "mode", path, defaults.mode, MODES),  # type: ignore[arg-type]
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        target_load_per_replica=target,
        scrape_interval_s=_number(a, "scrapeIntervalSeconds", path, defaults.scrape_interval_s,
                                  minimum=1),
        tolerance=_number(a, "tolerance", path, defaults.tolerance, minimum=0, maximum=1),
        max_missing_fraction=_number(a, "maxMissingFraction", path, defaults.max_missing_fraction,
                                     minimum=0, maximum=1),
        scale_up=_parse_rules(_obj(a.get("scaleUp"), f"{path}.scaleUp"), f"{path}.scaleUp",
                              DEFAULT_SCALE_UP),
        scale_down=_parse_rules(_obj(a.get("scaleDown"), f"{path}.scaleDown"), f"{path}.scaleDown",
                                DEFAULT_SCALE_DOWN),
    )


def _parse_rules(rules: Mapping[str, Any], path: str, default: ScalingRules) -> ScalingRules:
    raw_policies = rules.get("policies")
    if raw_policies is None:
        policies = default.policies
    else:
        policies = tuple(_parse_policy(p, f"{path}.policies[{i}]")
                         for i, p in enumerate(_list_of_objects(raw_policies, f"{path}.policies")))
        if not policies:
            raise SpecError(f"{path}.policies must list at least one policy (or be left out)")
    window = _int(rules, "stabilizationWindowSeconds", path, default.stabilization_window_s, minimum=0)
    if window > 3600:
        raise SpecError(f"{path}.stabilizationWindowSeconds must be <= 3600, got {window}")
    return ScalingRules(
        stabilization_window_s=window,
        policies=policies,
        select_policy=_enum(rules, "selectPolicy", path, default.select_policy,  # type: ignore[arg-type]
                            SELECT_POLICIES),
    )


def _parse_policy(policy: Mapping[str, Any], path: str) -> ScalingPolicy:
    policy_type = _enum(policy, "type", path, None, POLICY_TYPES)
    period_s = _int(policy, "periodSeconds", path, None, minimum=1)
    if period_s > 1800:
        raise SpecError(f"{path}.periodSeconds must be <= 1800, got {period_s}")
    return ScalingPolicy(type=policy_type,  # type: ignore[arg-type]
                         value=_int(policy, "value", path, None, minimum=1), period_s=period_s)


def _parse_env(raw: Any) -> tuple[Mapping[str, Any], ...]:
    env = _list_of_objects(raw, "spec.env")
    for i, var in enumerate(env):
        if not isinstance(var.get("name"), str) or not var["name"]:
            raise SpecError(f"spec.env[{i}].name is required")
    return env


# Typed getters: the emulator (and an API server without the schema) lets any JSON through, so a
# wrong type must become a SpecError with the field's path, not a crash in a builder.

def _obj(value: Any, path: str, required: bool = False) -> Mapping[str, Any]:
    if value is None:
        if required:
            raise SpecError(f"{path} is required")
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{path} must be an object, got {type(value).__name__}")
    return value


def _list_of_objects(value: Any, path: str) -> tuple[Mapping[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise SpecError(f"{path} must be a list of objects")
    return tuple(value)


def _string_map(value: Any, path: str) -> Mapping[str, str]:
    obj = _obj(value, path)
    if not all(isinstance(v, str) for v in obj.values()):
        raise SpecError(f"{path} values must be strings")
    return obj


def _str(obj: Mapping[str, Any], key: str, path: str, default: str | None) -> str | None:
    value = obj.get(key, default)
    if value is not None and not isinstance(value, str):
        raise SpecError(f"{path}.{key} must be a string, got {value!r}")
    return value


def _enum(obj: Mapping[str, Any], key: str, path: str, default: str | None,
          allowed: tuple[str, ...]) -> str:
    value = obj.get(key, default)
    if value not in allowed:
        raise SpecError(f"{path}.{key} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _bool(obj: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    value = obj.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(f"{path}.{key} must be true or false, got {value!r}")
    return value


def _int(obj: Mapping[str, Any], key: str, path: str, default: int | None, minimum: int) -> int:
    value = obj.get(key, default)
    if value is None:
        raise SpecError(f"{path}.{key} is required")
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{path}.{key} must be an integer, got {value!r}")
    if value < minimum:
        raise SpecError(f"{path}.{key} must be >= {minimum}, got {value}")
    return value


def _number(obj: Mapping[str, Any], key: str, path: str, default: float,
            minimum: float | None = None, maximum: float | None = None) -> float:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SpecError(f"{path}.{key} must be a number, got {value!r}")
    if minimum is not None and value < minimum:
        raise SpecError(f"{path}.{key} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise SpecError(f"{path}.{key} must be <= {maximum}, got {value}")
    return float(value)


def _quantity(obj: Mapping[str, Any], key: str, path: str, default: str) -> str:
    value = obj.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise SpecError(f"{path}.{key} must be a Kubernetes quantity, got {value!r}")
    try:
        amount = parse_quantity(value)
    except ValueError:
        raise SpecError(f"{path}.{key} is not a Kubernetes quantity: {value!r}") from None
    if amount <= 0:
        raise SpecError(f"{path}.{key} must be > 0, got {value!r}")
    return str(value)
