"""Drive the real Helm library (helm-sdkpy in the Python >= 3.12 tool venv) from the 3.11 tests.

Each call is one subprocess running helm_run.py (next to this file) with a list of actions, so that
releases kept by HELM_DRIVER=memory live through the whole list (install, then status, then uninstall).
"""
from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "scoring-fleet"
HELM_RUN = Path(__file__).resolve().parent / "helm_run.py"

# Helm's severities (helm.sh/helm/v4/pkg/chart/v2/lint/support).
SEVERITY_WARNING = 2


class HelmActionError(AssertionError):
    """An action the test expected to succeed failed; the message is Helm's."""


@dataclass(frozen=True)
class HelmTool:
    python: Path
    home: Path  # Helm's cache/config/data folders, kept out of the user's home

    def run(self, actions: list[dict[str, Any]], kubeconfig: str | None = None,
            timeout_s: float = 120) -> list[dict[str, Any]]:
        """Run the actions in one process; one {"ok", "result" | "error"} per action."""
        env = {**os.environ, "HELM_DRIVER": "memory",  # read by Go at process start: set it here
               "HELM_CACHE_HOME": str(self.home / "cache"),
               "HELM_CONFIG_HOME": str(self.home / "config"),
               "HELM_DATA_HOME": str(self.home / "data")}
        if kubeconfig:
            env["KUBECONFIG"] = kubeconfig
        out = subprocess.run([str(self.python), str(HELM_RUN)], input=json.dumps(actions),
                             capture_output=True, text=True, env=env, timeout=timeout_s)
        if out.returncode != 0:
            raise HelmActionError(f"helm_run.py exited {out.returncode}: {out.stderr[-2000:]}")
        return json.loads(out.stdout)

    def lint(self, chart: Path = CHART) -> dict[str, Any]:
        (result,) = self.run([{"action": "lint", "chart": str(chart)}])
        if not result["ok"]:
            raise HelmActionError(result["error"])
        return result["result"]


def manifest_objects(release: dict[str, Any]) -> list[dict[str, Any]]:
    """The objects of an install's manifest (exactly what `helm template` prints), hooks included."""
    texts = [release.get("manifest", "")] + [hook.get("manifest", "")
                                             for hook in release.get("hooks") or []]
    return [doc for text in texts for doc in yaml.safe_load_all(text) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj.get("kind") == kind]
