"""The ScoringFleet API's names, in one place: group, version, kind, plural, labels, annotations.

Every other module (kube, handlers, builders, status, __main__) takes these from here, so the API
group is spelled once in the product. Pure: constants and two small label helpers.
"""
from __future__ import annotations

GROUP = "scoring.fleet.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "ScoringFleet"
PLURAL = "scoringfleets"
# kopf's bookkeeping annotations and the finalizer carry this prefix (see __main__.make_settings).
ANNOTATION_PREFIX = GROUP
# The one label that selects a fleet's pods (Deployment, Service, PDB, status.selector).
FLEET_LABEL = f"{GROUP}/fleet"
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
