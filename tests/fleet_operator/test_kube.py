"""kube.py against the emulator through a real kubernetes ApiClient (no operator running)."""
from __future__ import annotations

import http.server
import socket
import threading
from datetime import datetime, timezone

import kubernetes.client
import pytest

from fleet_operator import kube
from fleet_operator.builders import build_service
from fleet_operator.spec.fleet import parse_fleet
from tests.fleet_operator.crd_schema import CRD_PATH, ROOT, load_yaml

NOW = datetime(2026, 11, 29, 18, 0, tzinfo=timezone.utc)


@pytest.fixture()
def api(kube_api):
    kube_api.apply_file(CRD_PATH)
    return kube_api.client()


def service():
    return build_service(parse_fleet("qwen", "default", {"model": {"source": "m"}, "image": "i"}))


def test_apply_creates_then_leaves_alone_then_patches_only_drift(api):
    action, created = kube.apply(api, service())
    assert action == "created"
    action, same = kube.apply(api, service())
    assert action == "unchanged"
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    changed = service()
    changed["spec"]["ports"][0]["port"] = 31000
    action, patched = kube.apply(api, changed)
    assert action == "patched" and patched["spec"]["ports"][0]["port"] == 31000


def test_get_and_delete_of_a_missing_object(api):
    assert kube.get(api, "v1", "Service", "default", "nope") is None
    assert kube.delete(api, "v1", "Service", "default", "nope") is False


def test_create_of_an_existing_object_is_a_retryable_conflict(api):
    path = kube.object_path("v1", "Service", "default")
    kube.request(api, "POST", path, body=service())
    with pytest.raises(kube.ApiError) as error:
        kube.request(api, "POST", path, body=service())
    assert error.value.status == 409 and kube.is_retryable(error.value.status)


def test_a_status_update_computed_over_a_stale_fleet_is_recomputed_not_clobbering(kube_api, api):
    # Two writers, no lock: the reconciler writes SpecValid between the autoscaler's read and write.
    kube_api.apply_file(ROOT / "examples" / "minimal.yaml")
    name = load_yaml(ROOT / "examples" / "minimal.yaml")["metadata"]["name"]
    stale = kube.get_fleet(api, "default", name)
    kube.patch_fleet_status(api, "default", name, {"conditions": [{"type": "SpecValid", "status": "True"}]})
    seen = []

    def add_metrics_condition(fleet):
        conditions = (fleet.get("status") or {}).get("conditions") or []
        seen.append([c["type"] for c in conditions])
        return {"conditions": conditions + [{"type": "MetricsAvailable", "status": "True"}]}

    before, patch = kube.update_fleet_status(api, stale, add_metrics_condition)
    assert seen == [[], ["SpecValid"]]  # the first attempt got a 409 and was recomputed
    conditions = kube.get_fleet(api, "default", name)["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["SpecValid", "MetricsAvailable"]
    assert before["metadata"]["resourceVersion"] != stale["metadata"]["resourceVersion"]


def test_a_scale_with_a_stale_resource_version_is_a_conflict(kube_api, api):
    kube_api.apply_file(ROOT / "examples" / "minimal.yaml")
    name = load_yaml(ROOT / "examples" / "minimal.yaml")["metadata"]["name"]
    stale = kube.get_fleet(api, "default", name)
    kube.scale_fleet(api, "default", name, 2)
    with pytest.raises(kube.ApiError) as error:
        kube.scale_fleet(api, "default", name, 3, stale["metadata"]["resourceVersion"])
    assert error.value.status == 409
    assert kube.get_fleet(api, "default", name)["spec"]["replicas"] == 2


def test_fleet_status_and_scale_subresources(kube_api, api):
    kube_api.apply_file(ROOT / "examples" / "minimal.yaml")
    name = load_yaml(ROOT / "examples" / "minimal.yaml")["metadata"]["name"]
    kube.patch_fleet_status(api, "default", name, {"desiredReplicas": 2, "selector": "a=b"})
    kube.scale_fleet(api, "default", name, 4)
    fleet = kube.get_fleet(api, "default", name)
    assert fleet["spec"]["replicas"] == 4
    assert fleet["status"]["desiredReplicas"] == 2


def test_list_fleet_pods_selects_by_the_fleet_label(kube_api, api):
    kube_api.add_pod("default", "a-0", {"scoring.fleet.dev/fleet": "a"}, "127.0.0.2", 30000)
    kube_api.add_pod("default", "b-0", {"scoring.fleet.dev/fleet": "b"}, "127.0.0.3", 30000)
    pods = kube.list_fleet_pods(api, "default", "a")
    assert [(p["metadata"]["name"], p["status"]["podIP"]) for p in pods] == [("a-0", "127.0.0.2")]


def test_post_event_about_a_fleet(kube_api, api):
    kube_api.apply_file(ROOT / "examples" / "minimal.yaml")
    fleet = kube.get_fleet(api, "default", "qwen-scorer")
    event = kube.post_event(api, fleet, "Warning", "InvalidSpec", "bad", NOW)
    assert event["involvedObject"]["uid"] == fleet["metadata"]["uid"]
    assert (event["type"], event["reason"], event["message"]) == ("Warning", "InvalidSpec", "bad")


class _Unavailable(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        body = b'{"kind": "Status", "reason": "ServiceUnavailable", "message": "etcd is sad"}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _client_for(url):
    configuration = kubernetes.client.Configuration()
    configuration.host = url
    configuration.retries = False
    return kubernetes.client.ApiClient(configuration)


def test_a_5xx_answer_is_a_retryable_api_error():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unavailable)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with _client_for(f"http://127.0.0.1:{server.server_port}") as api:
            with pytest.raises(kube.ApiError) as error:
                kube.get(api, "v1", "Service", "default", "x")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert (error.value.status, error.value.reason) == (503, "ServiceUnavailable")
    assert kube.is_retryable(error.value.status)


def test_an_unreachable_api_server_is_a_retryable_api_error():
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with _client_for(f"http://127.0.0.1:{port}") as api:
        with pytest.raises(kube.ApiError) as error:
            kube.get(api, "v1", "Service", "default", "x")
    assert error.value.status == 0 and kube.is_retryable(0)


@pytest.mark.parametrize("body, uid, live", [
    (None, None, False),
    ({"metadata": {"uid": "u1"}}, None, True),
    ({"metadata": {"uid": "u1"}}, "u1", True),
    ({"metadata": {"uid": "u2"}}, "u1", False),
    ({"metadata": {"uid": "u1", "deletionTimestamp": "2026-01-01T00:00:00Z"}}, "u1", False),
], ids=["gone", "any-uid", "same-uid", "namesake", "being-deleted"])
def test_is_live_fleet(body, uid, live):
    assert kube.is_live_fleet(body, uid) is live
