"""Pure: compare a built child with the live object and compute the merge patch that reverts drift.

"Managed" fields are those the builder sets: a live object may carry more (server defaults, other
controllers' annotations) without that being drift. Lists are compared element by element and
replaced whole when they differ (JSON merge patch semantics). A few optional fields the builder omits
when empty (nodeSelector, tolerations, affinity) are ours even when absent: a stale live value is
removed with null.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet_operator.spec.quantity import parse_quantity

Path = tuple[str, ...]

DEPLOYMENT_OPTIONAL: frozenset[Path] = frozenset({
    ("spec", "template", "spec", "nodeSelector"),
    ("spec", "template", "spec", "tolerations"),
    ("spec", "template", "spec", "affinity"),
})


def drift_patch(desired: Mapping[str, Any], actual: Mapping[str, Any],
                owned_optional: frozenset[Path] = frozenset(),
                path: Path = ()) -> dict[str, Any] | None:
    """A JSON merge patch that makes `actual` carry `desired`'s fields, or None if it already does."""
    patch: dict[str, Any] = {}
    for key, want in desired.items():
        here = path + (key,)
        if key not in actual:
            patch[key] = want
        elif isinstance(want, Mapping) and isinstance(actual[key], Mapping):
            sub = drift_patch(want, actual[key], owned_optional, here)
            if sub is not None:
                patch[key] = sub
        elif not covers(want, actual[key], here):
            patch[key] = want
    for owned in owned_optional:
        if owned[:-1] == path and owned[-1] not in desired and actual.get(owned[-1]) is not None:
            patch[owned[-1]] = None
    return patch or None


def covers(desired: Any, actual: Any, path: Path = ()) -> bool:
    """True if every field of `desired` is in `actual` with an equal value (extra fields are fine)."""
    if isinstance(desired, Mapping):
        return isinstance(actual, Mapping) and all(
            k in actual and covers(v, actual[k], path + (k,)) for k, v in desired.items())
    if isinstance(desired, list):
        return (isinstance(actual, list) and len(desired) == len(actual)
                and all(covers(d, a, path) for d, a in zip(desired, actual)))
    if desired == actual:
        return True
    # The API server rewrites resource quantities in canonical form ("0.5" -> "500m").
    return "resources" in path and _same_quantity(desired, actual)


def _same_quantity(a: Any, b: Any) -> bool:
    try:
        return parse_quantity(a) == parse_quantity(b)
    except (ValueError, TypeError):
        return False
