"""Run Helm actions through helm-sdkpy and print their results as JSON (runs in the helm tool venv).

Reads a JSON list of actions on stdin and runs them in order in this one process, because with
HELM_DRIVER=memory (which must be in the environment when the process starts: Go reads it once) the
releases live only as long as the process:

    [{"action": "lint", "chart": "charts/scoring-fleet"},
     {"action": "install", "release": "sf", "namespace": "ops", "chart": "charts/scoring-fleet",
      "values": {...}, "create_namespace": true, "wait": true, "timeout_s": 60},
     {"action": "status", "release": "sf", "namespace": "ops"},
     {"action": "uninstall", "release": "sf", "namespace": "ops"}]

Prints one JSON list, a {"ok": bool, "result" | "error": ...} per action; an action that fails does
not stop the next. The cluster is the one in $KUBECONFIG (or --kubeconfig).

    HELM_DRIVER=memory .tools/helm-venv/bin/python tests/packaging/helm_run.py [--kubeconfig PATH] < actions.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import helm_sdkpy as helm


async def _lint(config: helm.Configuration, action: dict[str, Any]) -> Any:
    return await helm.Lint(config).run(action["chart"])


async def _install(config: helm.Configuration, action: dict[str, Any]) -> Any:
    return await helm.Install(config).run(
        action["release"], action["chart"], values=action.get("values") or None,
        create_namespace=action.get("create_namespace", False), wait=action.get("wait", False),
        timeout=action.get("timeout_s", 60),
    )


async def _upgrade(config: helm.Configuration, action: dict[str, Any]) -> Any:
    return await helm.Upgrade(config).run(
        action["release"], action["chart"], values=action.get("values") or None,
        wait=action.get("wait", False), timeout=action.get("timeout_s", 60),
    )


async def _status(config: helm.Configuration, action: dict[str, Any]) -> Any:
    return await helm.Status(config).run(action["release"])


async def _uninstall(config: helm.Configuration, action: dict[str, Any]) -> Any:
    return await helm.Uninstall(config).run(action["release"], wait=action.get("wait", False),
                                            timeout=action.get("timeout_s", 60))


ACTIONS = {"lint": _lint, "install": _install, "upgrade": _upgrade, "status": _status,
           "uninstall": _uninstall}


async def run_actions(actions: list[dict[str, Any]], kubeconfig: str | None) -> list[dict[str, Any]]:
    """Run each action with a Configuration for its namespace; collect results or error texts."""
    results = []
    # NOTE: with the memory driver each Configuration has its own release storage: keep one per
    # namespace, or a later action cannot see the release an earlier one installed.
    configs: dict[str, helm.Configuration] = {}
    for action in actions:
        try:
            namespace = action.get("namespace", "default")
            if namespace not in configs:
                configs[namespace] = helm.Configuration(namespace=namespace, kubeconfig=kubeconfig)
            config = configs[namespace]
            result = await ACTIONS[action["action"]](config, action)
            results.append({"ok": True, "result": result})
        except Exception as exc:  # reported to the caller, which decides what a failure means
            results.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description="Run Helm actions (JSON on stdin) via helm-sdkpy.")
    parser.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG or ~/.kube/config")
    args = parser.parse_args()
    actions = json.load(sys.stdin)
    json.dump(asyncio.run(run_actions(actions, args.kubeconfig)), sys.stdout, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
