"""spec.autoscaling of a ScoringFleet: the frozen AutoscalingSpec and its parsing.

Field names follow Kubernetes' autoscaling/v2 HPA behavior types; units are in the names. Every
default, bound and enum comes from the CRD (crd.py); only the rate policies' defaults, which the CRD
leaves to the operator, are written here. Pure: no I/O.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fleet_operator.context import PROMETHEUS_ADDRESS_ENV, is_http_url
from fleet_operator.spec import crd
from fleet_operator.spec.fields import Fields, SpecError

PolicyType = Literal["Pods", "Percent"]
SelectPolicy = Literal["Max", "Min", "Disabled"]
AutoscalingMode = Literal["native", "hpa", "keda"]


def _default(*path: str) -> Any:
    return crd.default("autoscaling", *path)


@dataclass(frozen=True)
class ScalingPolicy:
    """At most `value` pods (or `value` percent of the replicas) changed within `period_s`."""

    type: PolicyType
    value: int
    period_s: int


@dataclass(frozen=True)
class ScalingRules:
    """One direction's behavior: a stabilization window and rate policies (HPAScalingRules)."""

    stabilization_window_s: int
    policies: tuple[ScalingPolicy, ...]
    select_policy: SelectPolicy = _default("scaleUp", "selectPolicy")


# HPA's own defaults: up max(+4 pods, +100%) per 15 s, down -100% per 15 s.
DEFAULT_SCALE_UP = ScalingRules(
    stabilization_window_s=_default("scaleUp", "stabilizationWindowSeconds"),
    policies=(ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15)),
)
DEFAULT_SCALE_DOWN = ScalingRules(
    stabilization_window_s=_default("scaleDown", "stabilizationWindowSeconds"),
    policies=(ScalingPolicy("Percent", 100, 15),),
    select_policy=_default("scaleDown", "selectPolicy"),
)


@dataclass(frozen=True)
class KedaSpec:
    """spec.autoscaling.keda, the operator's settings filled in: what keda mode's trigger reads.

    prometheus_address is None only outside keda mode (in keda mode the parser requires one).
    authentication_ref names a TriggerAuthentication in the fleet's namespace, or is None.
    """

    prometheus_address: str | None = None
    authentication_ref: str | None = None


@dataclass(frozen=True)
class AutoscalingSpec:
    """spec.autoscaling of a ScoringFleet, defaults applied (the CRD's).

    target_load_per_replica counts running + waiting sequences per pod. A pod without a fresh
    sample is "missing"; when more than max_missing_fraction of the pods that should report are
    missing, the fleet does not scale down (MetricsDegraded). The default 0 means any missing pod
    blocks scale-down: no data is never read as "no load".
    """

    enabled: bool = _default("enabled")
    mode: AutoscalingMode = _default("mode")
    min_replicas: int = _default("minReplicas")
    max_replicas: int = _default("maxReplicas")
    target_load_per_replica: float = float(_default("targetLoadPerReplica"))
    scrape_interval_s: float = float(_default("scrapeIntervalSeconds"))
    tolerance: float = float(_default("tolerance"))
    max_missing_fraction: float = float(_default("maxMissingFraction"))
    scale_up: ScalingRules = field(default=DEFAULT_SCALE_UP)
    scale_down: ScalingRules = field(default=DEFAULT_SCALE_DOWN)
    keda: KedaSpec = field(default=KedaSpec())

    @property
    def is_native(self) -> bool:
        """The operator itself sizes the fleet (enabled, mode native)."""
        return self.enabled and self.mode == "native"

    @property
    def is_hpa(self) -> bool:
        """An HPA sizes the fleet (enabled, mode hpa): the operator builds it and stays out."""
        return self.enabled and self.mode == "hpa"

    @property
    def is_keda(self) -> bool:
        """A KEDA ScaledObject sizes the fleet (enabled, mode keda): the operator builds it and stays out."""
        return self.enabled and self.mode == "keda"


def parse_autoscaling(autoscaling: Mapping[str, Any] | None, path: str = "spec.autoscaling",
                      prometheus_address: str | None = None) -> AutoscalingSpec:
    """spec.autoscaling (camelCase, as in the CRD) -> AutoscalingSpec with defaults, or SpecError.

    Public for the replay tool, whose traces carry the same mapping; `path` prefixes error messages.
    prometheus_address is the operator's default for keda mode's trigger (a fleet may set its own).
    """
    a = Fields.of(autoscaling, path, crd.spec_schema("autoscaling"))
    min_replicas, max_replicas = a.integer("minReplicas"), a.integer("maxReplicas")
    # The cross-field rules' one home in the operator (the builders trust the parsed spec). The
    # CRD's CEL rules are the API server's check of the same; not every API server runs them.
    if min_replicas > max_replicas:
        raise SpecError(f"{path}.minReplicas ({min_replicas}) must be <= maxReplicas ({max_replicas})")
    target = a.number("targetLoadPerReplica")
    enabled, mode = a.boolean("enabled"), a.enum("mode")
    # a fleet at 0 pods has no load series, so KEDA's trigger could never wake it
    if mode == "keda" and min_replicas < 1:
        raise SpecError(f"{path}.minReplicas must be >= 1 in keda mode (got {min_replicas}): a fleet "
                        "at 0 pods has no load series, which KEDA's trigger reads as an error")
    return AutoscalingSpec(
        enabled=enabled,
        mode=mode,  # type: ignore[arg-type]
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        target_load_per_replica=target,
        scrape_interval_s=a.number("scrapeIntervalSeconds"),
        tolerance=a.number("tolerance"),
        max_missing_fraction=a.number("maxMissingFraction"),
        scale_up=_parse_rules(a.child("scaleUp"), DEFAULT_SCALE_UP),
        scale_down=_parse_rules(a.child("scaleDown"), DEFAULT_SCALE_DOWN),
        keda=_parse_keda(a.child("keda"), prometheus_address) if enabled and mode == "keda" else KedaSpec(),
    )


def _parse_keda(keda: Fields, default_address: str | None) -> KedaSpec:
    """keda mode's trigger settings: the fleet's own, else the operator's; an address is required."""
    address = keda.string("prometheusAddress") or default_address
    if not address:
        raise SpecError(f"keda mode needs a Prometheus address for its trigger: set "
                        f"{keda.path}.prometheusAddress, or the operator's {PROMETHEUS_ADDRESS_ENV} "
                        f"(the chart's keda.prometheusAddress)")
    if not is_http_url(address):
        raise SpecError(f"{keda.path}.prometheusAddress must be an http(s) URL, got {address!r}")
    return KedaSpec(prometheus_address=address, authentication_ref=keda.string("authenticationRef") or None)


def _parse_rules(rules: Fields, default: ScalingRules) -> ScalingRules:
    raw_policies = rules.value.get("policies")
    if raw_policies is None:
        policies = default.policies
    else:
        items = rules.schema["properties"]["policies"]["items"]
        policies = tuple(_parse_policy(Fields(p, f"{rules.path}.policies[{i}]", items))
                         for i, p in enumerate(rules.objects("policies")))
        if not policies:
            raise SpecError(f"{rules.path}.policies must list at least one policy (or be left out)")
    return ScalingRules(
        stabilization_window_s=rules.integer("stabilizationWindowSeconds"),
        policies=policies,
        select_policy=rules.enum("selectPolicy"),  # type: ignore[arg-type]
    )


def _parse_policy(policy: Fields) -> ScalingPolicy:
    policy_type = policy.enum("type")
    period_s = policy.integer("periodSeconds")
    return ScalingPolicy(type=policy_type, value=policy.integer("value"),  # type: ignore[arg-type]
                         period_s=period_s)
