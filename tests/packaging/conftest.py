"""Fixtures for the chart tests: the Helm tool venv (made on first use) and releases rendered by a
real install into the Kubernetes API emulator (kube_emulator/)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from kube_emulator.fixtures import *  # noqa: F401,F403  (kube_api: the project's one emulator)
from tests.packaging import helm_env
from tests.packaging.helm_tool import CHART, HelmActionError, HelmTool, manifest_objects

RELEASE = "sf"
RELEASE_NS = "scoring-system"


@pytest.fixture(scope="session")
def helm(tmp_path_factory) -> HelmTool:
    """helm-sdkpy in .tools/helm-venv; first use creates it from PyPI (~10 s), later runs reuse it."""
    try:
        python = helm_env.ensure_tool("helm")
    except helm_env.NoPythonError as exc:
        pytest.skip(f"helm-sdkpy needs Python >= 3.12: {exc}")
    return HelmTool(python=python, home=tmp_path_factory.mktemp("helm-home"))


@pytest.fixture()
def api_get(kube_api) -> Callable[[str], dict[str, Any] | None]:
    """GET a path from the emulator: the object, or None on 404."""
    def get(path: str) -> dict[str, Any] | None:
        status, body = kube_api.request("GET", path)
        if status == 404:
            return None
        assert status == 200, (path, status, body)
        return body
    return get


@pytest.fixture()
def api_create(kube_api) -> Callable[[str, dict[str, Any]], dict[str, Any]]:
    def create(path: str, obj: dict[str, Any]) -> dict[str, Any]:
        status, body = kube_api.request("POST", path, obj)
        assert status == 201, (path, status, body)
        return body
    return create


@dataclass(frozen=True)
class Release:
    objects: list[dict[str, Any]]  # the manifest and the hooks, parsed
    notes: str
    hooks_ran: bool  # False: the emulator could not run the hooks (see OPENAPI_GAP)


# Helm validates hook objects against the server's OpenAPI document whatever the install options
# say, and the emulator serves none: an install with a hook (the sample fleet) then stops at the hook,
# after creating everything else. That one failure is the emulator's, not the chart's.
OPENAPI_GAP = "failed to download openapi"


@pytest.fixture()
def render_release(helm, kube_api, api_create) -> Callable[..., Release]:
    """Install the chart with `values` into this test's emulator (release sf in scoring-system).

    The release namespace and `namespaces` are created first (Roles go into existing namespaces).
    """
    def render(values: dict[str, Any], namespaces: list[str] = ()) -> Release:
        for name in [RELEASE_NS, *namespaces]:
            api_create("/api/v1/namespaces",
                       {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        install, status = helm.run([
            {"action": "install", "release": RELEASE, "namespace": RELEASE_NS,
             "chart": str(CHART), "values": values},
            {"action": "status", "release": RELEASE, "namespace": RELEASE_NS},
        ], kubeconfig=str(kube_api.kubeconfig))
        if not install["ok"] and not (OPENAPI_GAP in install["error"] and "hook" in install["error"]):
            raise HelmActionError(install["error"])
        assert status["ok"], status
        release = status["result"]
        return Release(objects=manifest_objects(release), notes=_notes(release),
                       hooks_ran=install["ok"])
    return render


@pytest.fixture()
def render(render_release) -> Callable[..., list[dict[str, Any]]]:
    """Like render_release, only the objects."""
    return lambda values, namespaces=(): render_release(values, namespaces).objects


def _notes(release: dict[str, Any]) -> str:
    info = release.get("info") or {}
    return info.get("notes") or release.get("notes") or ""
