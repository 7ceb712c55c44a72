"""A ScoringFleet's spec as one frozen FleetSpec, defaults applied, or a SpecError saying why not.

Defaults, bounds and enums are the CRD's (read through crd.py and fields.py, never restated); this
module adds the checks the API server cannot do for us: names too long for the children,
quantities, an image for GPU fleets. spec.autoscaling is autoscaling.py's. Pure: no
Kubernetes calls, no clock.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fleet_operator import names
from fleet_operator.context import OperatorConfig
from fleet_operator.spec import crd
from fleet_operator.spec.autoscaling import AutoscalingSpec, parse_autoscaling
from fleet_operator.spec.fields import Fields, SpecError, as_object, list_of_objects, string_map
from fleet_operator.spec.inference_pool import InferencePoolSpec, parse_inference_pool
from fleet_operator.spec.model import ModelSpec, parse_model
from fleet_operator.spec.network import NetworkPolicySpec, parse_network_policy
from fleet_operator.spec.sources import (
    ConfigMapKeyRef,
    SecretKeyRef,
    VolumeSource,
    parse_config_map_ref,
    parse_secret_ref,
)

__all__ = ["AuthSpec", "ConfigMapKeyRef", "FleetSpec", "GatewaySpec", "ModelSpec", "NetworkPolicySpec", "ResourceSpec",
           "RolloutSpec", "SecretKeyRef", "ServerSpec", "SpecError", "VolumeSource", "parse_fleet"]

# Children (Service above all) are named after the fleet: a DNS-1035 label of at most 63 characters.
MAX_NAME_LEN = 63
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# An operator configured with nothing: no default image, Prometheus, namespace or gateway image.
UNCONFIGURED = OperatorConfig()


@dataclass(frozen=True)
class ResourceSpec:
    gpus: int = crd.default("resources", "gpus")
    cpu: str = crd.default("resources", "cpu")
    memory: str = crd.default("resources", "memory")


@dataclass(frozen=True)
class ServerSpec:
    port: int = crd.default("server", "port")
    max_running_requests: int = crd.default("server", "maxRunningRequests")
    max_prefill_tokens: int | None = None  # None: the server picks by device
    max_total_tokens: int = crd.default("server", "maxTotalTokens")
    max_queued_requests: int = crd.default("server", "maxQueuedRequests")
    request_timeout_s: int = crd.default("server", "requestTimeoutSeconds")
    startup_timeout_s: int = crd.default("server", "startupTimeoutSeconds")  # the startupProbe's
    # spec.server.rerankTemplate: a built-in's name, a ConfigMap's key, or None (the server picks)
    rerank_template: str | ConfigMapKeyRef | None = None


@dataclass(frozen=True)
class GatewaySpec:
    """spec.gateway: the fleet's own gateway (python -m gateway) in front of its pods."""

    enabled: bool = crd.default("gateway", "enabled")
    replicas: int = crd.default("gateway", "replicas")
    port: int = crd.default("gateway", "port")
    queue_timeout_s: int = crd.default("gateway", "queueTimeoutSeconds")
    policy: str = crd.default("gateway", "policy")  # the gateway's --policy
    cpu: str = crd.default("gateway", "resources", "cpu")
    memory: str = crd.default("gateway", "resources", "memory")
    # spec.gateway.image, else the operator's gateway image (the control image); None: the fleet's
    # image (it has the gateway too). The builder picks: gateway_image(fleet).
    image: str | None = None
    # spec.gateway.fleets: the other fleets of the namespace this gateway routes to (never itself)
    fleets: tuple[str, ...] = ()
    # The names each of `fleets` serves (model, aliases, adapters), read from their ScoringFleets by
    # reconcile.py (I/O, so not the parse's); a fleet that does not exist is absent. The gateway
    # learns the rest from the pods.
    fleet_models: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class AuthSpec:
    """spec.auth: the API key the scoring pods and the gateway require (None: no key)."""

    api_key: SecretKeyRef | None = None


@dataclass(frozen=True)
class RolloutSpec:
    """spec.rollout: the Deployment's RollingUpdate, each an integer or a percentage ("25%")."""

    max_surge: int | str = crd.default("rollout", "maxSurge")
    max_unavailable: int | str = crd.default("rollout", "maxUnavailable")


@dataclass(frozen=True)
class FleetSpec:
    """Everything the builders need, for one fleet. Dict-valued fields are never mutated."""

    name: str
    namespace: str
    model: ModelSpec
    image: str
    replicas: int = crd.default("replicas")
    resources: ResourceSpec = ResourceSpec()
    server: ServerSpec = ServerSpec()
    autoscaling: AutoscalingSpec = AutoscalingSpec()
    gateway: GatewaySpec = GatewaySpec()
    auth: AuthSpec = AuthSpec()
    network_policy: NetworkPolicySpec = NetworkPolicySpec()
    rollout: RolloutSpec = RolloutSpec()
    inference_pool: InferencePoolSpec = InferencePoolSpec()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] = field(default_factory=dict)
    env: tuple[Mapping[str, Any], ...] = ()


def parse_fleet(name: str, namespace: str, spec: Mapping[str, Any] | None,
                defaults: OperatorConfig = UNCONFIGURED) -> FleetSpec:
    """CR metadata.name, metadata.namespace and spec -> FleetSpec, or SpecError.

    `defaults` is the operator's config: what a fleet leaves out. Its default_image (the server
    image; the operator itself runs the control image) is used only for CPU fleets, because nothing
    says it was built with CUDA; prometheus_address is keda mode's trigger's when the fleet names
    none; namespace is the operator's (its scrapes of the pods and the gateway come from there: the
    NetworkPolicies admit it); gateway_image is for gateway pods when spec.gateway.image is not set.
    """
    _check_name(name)
    top = Fields.of(spec, "spec", crd.spec_schema())
    model = parse_model(Fields.of(top.value.get("model"), "spec.model", crd.spec_schema("model"),
                                   required=True), name)
    resources = _parse_resources(top.child("resources"))
    autoscaling = parse_autoscaling(top.value.get("autoscaling"),
                                    prometheus_address=defaults.prometheus_address)
    gateway = _parse_gateway(top.child("gateway"), autoscaling, name, defaults.gateway_image)
    return FleetSpec(
        name=name,
        namespace=namespace,
        model=model,
        image=_image(top, resources, defaults.default_image),
        replicas=top.integer("replicas"),
        resources=resources,
        server=_parse_server(top.child("server")),
        autoscaling=autoscaling,
        gateway=gateway,
        auth=AuthSpec(api_key=parse_secret_ref(top.child("auth").value.get("apiKeySecretRef"),
                                                "spec.auth.apiKeySecretRef")),
        network_policy=parse_network_policy(top.value.get("networkPolicy"), defaults.namespace),
        rollout=_parse_rollout(top.child("rollout")),
        inference_pool=parse_inference_pool(top.value.get("inferencePool")),
        node_selector=string_map(top.value.get("nodeSelector"), "spec.nodeSelector"),
        tolerations=top.objects("tolerations"),
        affinity=as_object(top.value.get("affinity"), "spec.affinity"),
        env=_parse_env(top.value.get("env")),
    )


def _check_name(name: str) -> None:
    if len(name) > MAX_NAME_LEN:
        raise SpecError(f"metadata.name {name!r} is {len(name)} characters; children are named after "
                        f"the fleet and a Service name allows at most {MAX_NAME_LEN}")
    if not _DNS_1035.match(name):
        raise SpecError(f"metadata.name {name!r} must be a DNS-1035 label (lowercase letters, digits "
                        f"and '-', starting with a letter): the fleet's Service takes this name")


def _image(spec: Fields, resources: ResourceSpec, default_image: str | None) -> str:
    image = spec.string("image")
    if image:
        return image
    if resources.gpus > 0:
        raise SpecError("spec.image is required when resources.gpus > 0 (the operator's default "
                        "image is not known to be a CUDA build)")
    if not default_image:
        raise SpecError("spec.image is required: the operator has no default image configured")
    return default_image


def _parse_resources(res: Fields) -> ResourceSpec:
    return ResourceSpec(gpus=res.integer("gpus"), cpu=res.quantity("cpu"),
                        memory=res.quantity("memory"))


def _parse_server(srv: Fields) -> ServerSpec:
    return ServerSpec(
        port=srv.integer("port"),
        max_running_requests=srv.integer("maxRunningRequests"),
        max_prefill_tokens=srv.optional_integer("maxPrefillTokens"),
        max_total_tokens=srv.integer("maxTotalTokens"),
        max_queued_requests=srv.integer("maxQueuedRequests"),
        request_timeout_s=srv.integer("requestTimeoutSeconds"),
        startup_timeout_s=srv.integer("startupTimeoutSeconds"),
        rerank_template=_parse_rerank_template(srv),
    )


def _parse_rerank_template(srv: Fields) -> str | ConfigMapKeyRef | None:
    if srv.value.get("rerankTemplate") is None:
        return None
    template = srv.child("rerankTemplate")
    ref = template.value.get("configMapKeyRef")
    if ("builtin" in template.value) == (ref is not None):  # the CRD's CEL rule, repeated
        raise SpecError(f"{template.path} takes exactly one of builtin and configMapKeyRef")
    if ref is None:
        return template.enum("builtin")
    return parse_config_map_ref(ref, f"{template.path}.configMapKeyRef")


def _parse_gateway(gw: Fields, autoscaling: AutoscalingSpec, name: str,
                   default_image: str | None) -> GatewaySpec:
    gateway = GatewaySpec(enabled=gw.boolean("enabled"), replicas=gw.integer("replicas"),
                          port=gw.integer("port"), queue_timeout_s=gw.integer("queueTimeoutSeconds"),
                          policy=gw.enum("policy"),
                          cpu=gw.child("resources").quantity("cpu"),
                          memory=gw.child("resources").quantity("memory"),
                          image=gw.string("image") or default_image,
                          fleets=_gateway_fleets(gw, name))
    child = names.gateway_name(name)
    if gateway.enabled and len(child) > MAX_NAME_LEN:
        raise SpecError(f"spec.gateway.enabled: the gateway's children are named {child!r}, "
                        f"{len(child)} characters; a Service name allows at most {MAX_NAME_LEN}, "
                        f"so metadata.name may have at most {MAX_NAME_LEN - len(child) + len(name)}")
    # the CRD's CEL rules, repeated: not every API server runs them. At 0 pods only the waiting
    # requests of a gateway can say there is demand, and only the native autoscaler reads them; the
    # gateway may be this fleet's or another's that lists it (spec.gateway.fleets), which no rule
    # on one object can see: a fleet at 0 that no gateway serves says so in its lastDecision.
    if autoscaling.min_replicas == 0 and autoscaling.mode != "native":
        raise SpecError("spec.autoscaling.minReplicas 0 needs autoscaling.mode native (requests "
                        "waiting at a gateway wake the fleet, and only the native autoscaler reads them)")
    if gateway.fleets and not gateway.enabled:
        raise SpecError("spec.gateway.fleets needs spec.gateway.enabled (they are routed by this "
                        "fleet's gateway)")
    return gateway


def _gateway_fleets(gw: Fields, name: str) -> tuple[str, ...]:
    """spec.gateway.fleets in order, without repeats and without the fleet itself (its gateway
    routes to it anyway)."""
    raw = gw.value.get("fleets") or []
    if not isinstance(raw, list):
        raise SpecError(f"{gw.path}.fleets must be a list of ScoringFleet names, got {raw!r}")
    for i, other in enumerate(raw):
        if not isinstance(other, str) or not _DNS_1035.match(other) or len(other) > MAX_NAME_LEN:
            raise SpecError(f"{gw.path}.fleets[{i}] must be a ScoringFleet's name, got {other!r}")
    return tuple(other for other in dict.fromkeys(raw) if other != name)


def _parse_rollout(rollout: Fields) -> RolloutSpec:
    spec = RolloutSpec(max_surge=rollout.int_or_percent("maxSurge"),
                       max_unavailable=rollout.int_or_percent("maxUnavailable", max_percent=100))
    # the CRD's CEL rule, repeated: with both 0 a Deployment can neither add a pod nor remove one
    # (the API server refuses it), so the fleet's rollout would never start.
    if _is_zero(spec.max_surge) and _is_zero(spec.max_unavailable):
        raise SpecError("spec.rollout.maxSurge and spec.rollout.maxUnavailable cannot both be 0: "
                        "the rollout could never replace a pod (maxSurge 0 needs maxUnavailable >= 1)")
    return spec


def _is_zero(value: int | str) -> bool:
    return int(str(value).rstrip("%")) == 0


def _parse_env(raw: Any) -> tuple[Mapping[str, Any], ...]:
    env = list_of_objects(raw, "spec.env")
    for i, var in enumerate(env):
        if not isinstance(var.get("name"), str) or not var["name"]:
            raise SpecError(f"spec.env[{i}].name is required")
    return env
