"""The ScoringFleet API's names, in one place: group, version, kind, plural, labels, annotations.

Every other module (kube, handlers, builders, status, __main__) takes these from here; the API
group and the fleet label are the contract's (scoringfleet_contract.facts), which the gateway reads
too. Pure: constants and small label helpers.
"""
from __future__ import annotations

from scoringfleet_contract.facts import API_GROUP, FLEET_LABEL

GROUP = API_GROUP  # the contract spells it: the gateway discovers pods by FLEET_LABEL too
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "ScoringFleet"
PLURAL = "scoringfleets"
# kopf's bookkeeping annotations and the finalizer carry this prefix (see __main__.make_settings).
ANNOTATION_PREFIX = GROUP
# FLEET_LABEL, the one label that selects a fleet's pods (Deployment, Service, PDB, status.selector),
# is the contract's, imported above.
# Who writes: Events' source, and the children's app.kubernetes.io/managed-by.
COMPONENT = "scoring-fleet-operator"


def selector_labels(name: str) -> dict[str, str]:
    """The labels that select fleet `name`'s pods."""
    return {FLEET_LABEL: name}


def selector_string(name: str) -> str:
    """status.selector, the label selector the scale subresource reports."""
    return f"{FLEET_LABEL}={name}"


def fleet_labels(name: str) -> dict[str, str]:
    """Every label a fleet's children and pods carry."""
    return {
        **selector_labels(name),
        "app.kubernetes.io/name": "scoring-server",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "scorer",
        "app.kubernetes.io/part-of": "scoring-fleet",
        "app.kubernetes.io/managed-by": COMPONENT,
    }


# The gateway's children are not scoring pods: they carry GATEWAY_LABEL, never FLEET_LABEL, so
# neither the fleet's selectors nor the Prometheus monitors and rules (which read every pod with
# FLEET_LABEL as a scoring server) take them in.
GATEWAY_LABEL = f"{GROUP}/gateway"


def gateway_name(name: str) -> str:
    """The gateway's Deployment, Service, ServiceAccount, Role and RoleBinding of fleet `name`."""
    return f"{name}-gateway"


def gateway_selector_labels(name: str) -> dict[str, str]:
    """The labels that select fleet `name`'s gateway pods."""
    return {GATEWAY_LABEL: name}


def gateway_labels(name: str) -> dict[str, str]:
    """Every label the gateway's children and pods carry: the fleet's, with the gateway's selector
    in place of the fleet label and its own name and component."""
    return {
        **gateway_selector_labels(name),
        "app.kubernetes.io/name": "scoring-gateway",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "gateway",
        "app.kubernetes.io/part-of": "scoring-fleet",
        "app.kubernetes.io/managed-by": COMPONENT,
    }


# A gateway pod carries one such label per fleet it routes to (its own and spec.gateway.fleets): a
# fleet's NetworkPolicy admits, and its autoscaler reads the waiting requests of, the pods that
# carry its own, whichever fleet's gateway they are. One key per fleet: a pod may serve several.
SERVES_LABEL_PREFIX = f"serves.{GROUP}/"


def serves_label(name: str) -> str:
    """The label key that marks a gateway pod routing to fleet `name`."""
    return f"{SERVES_LABEL_PREFIX}{name}"


def serves_selector_labels(name: str) -> dict[str, str]:
    return {serves_label(name): "true"}


def serves_selector_string(name: str) -> str:
    """The gateway pods that route to fleet `name`, as a label selector."""
    return f"{serves_label(name)}=true"
