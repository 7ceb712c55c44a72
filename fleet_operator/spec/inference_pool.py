"""spec.inferencePool -> InferencePoolSpec: whether the fleet joins Gateway API inference routing.

An InferencePool (inference.networking.k8s.io/v1) selects the fleet's scoring pods for an Inference
Gateway, whose Endpoint Picker (EPP, a Service in the fleet's namespace) picks one per request from
the pods' SGLang gauges. This module reads the fields and repeats the CRD's checks the API server may
not run (a name for the EPP when enabled; DNS names); the pool itself is builders/inference_pool.py's.
Pure: no I/O.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fleet_operator.spec import crd
from fleet_operator.spec.fields import Fields, SpecError

PATH = "spec.inferencePool"
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # a Service name
_DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # a namespace name
MAX_NAME_LEN = 63


@dataclass(frozen=True)
class EndpointPickerSpec:
    """The EPP's Service: its name, its ext_proc port, and what the gateway does when it is silent."""

    name: str | None = None
    port: int = crd.default("inferencePool", "endpointPicker", "port")
    failure_mode: str = crd.default("inferencePool", "endpointPicker", "failureMode")


@dataclass(frozen=True)
class InferencePoolSpec:
    enabled: bool = crd.default("inferencePool", "enabled")
    endpoint_picker: EndpointPickerSpec = EndpointPickerSpec()
    # namespaces whose pods may reach the scoring pods' port: the gateway's data plane, an EPP
    allow_from_namespaces: tuple[str, ...] = ()


def parse_inference_pool(value: Any) -> InferencePoolSpec:
    """spec.inferencePool (None: the defaults, disabled) -> InferencePoolSpec, or SpecError."""
    pool = Fields.of(value, PATH, crd.spec_schema("inferencePool"))
    epp = pool.child("endpointPicker")
    spec = InferencePoolSpec(
        enabled=pool.boolean("enabled"),
        endpoint_picker=EndpointPickerSpec(name=epp.string("name"), port=epp.integer("port"),
                                           failure_mode=epp.enum("failureMode")),
        allow_from_namespaces=_namespaces(pool.value.get("allowFromNamespaces")),
    )
    name = spec.endpoint_picker.name
    if spec.enabled and not name:
        raise SpecError(f"{PATH}.enabled needs {PATH}.endpointPicker.name: the Endpoint Picker's Service, "
                        "which the Inference Gateway asks which pod takes each request")
    if name is not None and not _is_name(name, _DNS_1035):
        raise SpecError(f"{PATH}.endpointPicker.name {name!r} must be a Service name (a DNS-1035 label)")
    return spec


def _namespaces(raw: Any) -> tuple[str, ...]:
    path = f"{PATH}.allowFromNamespaces"
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SpecError(f"{path} must be a list of namespace names, got {raw!r}")
    for i, name in enumerate(raw):
        if not (isinstance(name, str) and _is_name(name, _DNS_1123)):
            raise SpecError(f"{path}[{i}] must be a namespace name (a DNS-1123 label), got {name!r}")
    return tuple(raw)


def _is_name(value: str, pattern: re.Pattern[str]) -> bool:
    return len(value) <= MAX_NAME_LEN and bool(pattern.match(value))
