"""Helpers of the reliability tests: a pod's /metrics served from a fixed text (a fake at the network
boundary, where the faults are), and a plain fleet with its convergence check."""
from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fleet_operator.crd_schema import ROOT, load_yaml
from tests.fleet_operator.operator_process import Cluster

IDLE = b"sglang:num_running_reqs 0\nsglang:num_queue_reqs 0\n"
HANG_S = 5.0  # a hanging /metrics: longer than the operator's scrape timeout, bounded to stop


class MetricsPod:
    """One pod's /metrics on host:port; `body` None = hang (up to HANG_S, or until stopped)."""

    def __init__(self, host: str, port: int, body: bytes | None) -> None:
        self.body = body
        self.stopping = threading.Event()
        self.asked = threading.Event()  # set on each request: a scrape is under way
        pod = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                pod.asked.set()
                if pod.body is None:
                    pod.stopping.wait(HANG_S)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(pod.body)))
                self.end_headers()
                self.wfile.write(pod.body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def fleet_doc(name: str, replicas: int) -> dict:
    doc = load_yaml(ROOT / "examples" / "minimal.yaml")
    doc["metadata"]["name"] = name
    doc["spec"]["replicas"] = replicas
    return doc


def converged(cluster: Cluster, name: str, replicas: int) -> bool:
    """The Deployment has the fleet's replicas, and the fleet's status reports this generation."""
    fleet, dep = cluster.fleet(name) or {}, cluster.deployment(name) or {}
    status = fleet.get("status") or {}
    return (dep.get("spec", {}).get("replicas") == replicas
            and fleet.get("spec", {}).get("replicas") == replicas
            and status.get("observedGeneration") == fleet["metadata"]["generation"]
            and status.get("replicas") == replicas)
