"""Pure: the securityContexts of every pod the operator builds, the scoring server's and the gateway's.

One home, so the two cannot drift apart: the restricted Pod Security Standard (non-root as the
image's user, no privilege escalation, a read-only root filesystem, every capability dropped, the
runtime's default seccomp profile; tests/reliability/pss.py holds the checks). Each call returns
fresh dicts: a builder's object is its own.
"""
from __future__ import annotations

from typing import Any

RUN_AS_UID = 65532  # the image's non-root user


def pod_security_context() -> dict[str, Any]:
    """The pod's: its user and group, fsGroup for the emptyDir volumes, seccomp."""
    return {
        "runAsNonRoot": True, "runAsUser": RUN_AS_UID, "runAsGroup": RUN_AS_UID,
        "fsGroup": RUN_AS_UID, "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    """Each container's: what the restricted standard asks of a container itself."""
    return {
        "runAsNonRoot": True, "runAsUser": RUN_AS_UID, "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
