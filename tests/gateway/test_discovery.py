"""gateway.discovery: which pod JSON is in rotation, and at which URL (a pure table)."""
import pytest

from gateway.discovery import pod_url, rotation


def pod(ready="True", ip="10.0.0.7", deleting=False, port_name="http"):
    metadata = {"name": "p", "deletionTimestamp": "2026-12-01T08:00:00Z" if deleting else None}
    return {"metadata": metadata,
            "spec": {"containers": [{"name": "server", "ports": [
                {"name": "metrics", "containerPort": 9000},
                {"name": port_name, "containerPort": 30000}]}]},
            "status": {"podIP": ip, "conditions": [{"type": "PodScheduled", "status": "True"},
                                                   {"type": "Ready", "status": ready}]}}


@pytest.mark.parametrize("obj, url", [
    (pod(), "http://10.0.0.7:30000"),                 # the port named http, not the first one
    (pod(ready="False"), None),
    (pod(deleting=True), None),                       # terminating (draining) though still Ready
    (pod(ip=None), None),                             # not scheduled yet
    (pod(port_name="web"), None),                     # no port named http: nowhere to send
    (pod(ip="fd00::7"), "http://[fd00::7]:30000"),
    ({"metadata": {"name": "p"}}, None),              # no status at all
], ids=["ready", "not-ready", "terminating", "no-ip", "no-http-port", "ipv6", "bare"])
def test_pod_url(obj, url):
    assert pod_url(obj) == url


def test_rotation_is_the_ready_pods_urls():
    assert rotation({"a": pod(), "b": pod(ready="False"), "c": pod(ip="10.0.0.8")}) == {
        "http://10.0.0.7:30000", "http://10.0.0.8:30000"}
