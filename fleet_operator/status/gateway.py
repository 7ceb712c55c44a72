"""Pure: status.gateway, what the reconciler reports of a fleet's gateway."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def gateway_status(address: str | None, deployment: Mapping[str, Any] | None,
                   fleets: Mapping[str, str | None] | None = None) -> dict[str, Any] | None:
    """status.gateway: the Service's address, the Deployment's ready pods and, when it routes to
    other fleets too, each with its model (none: not found); None (removed) without a gateway."""
    if address is None:
        return None
    ready = int(((deployment or {}).get("status") or {}).get("readyReplicas") or 0)
    status: dict[str, Any] = {"address": address, "readyReplicas": ready}
    if fleets and len(fleets) > 1:
        status["fleets"] = [{"name": name, **({"model": model} if model else {})}
                            for name, model in fleets.items()]
    return status
