"""Test helpers for fleets on loopback: pod i is 127.0.0.(i+2), all pods share the fleet's port."""
from __future__ import annotations

import socket


def pod_ip(index: int) -> str:
    return f"127.0.0.{index + 2}"


def free_port(hosts: list[str]) -> int:
    """A port free on every host (pods of a fleet share the container port)."""
    for _ in range(20):
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port = probe.getsockname()[1]
        if all(_bindable(host, port) for host in hosts[1:]):
            return port
    raise RuntimeError("no common free port")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
            return True
        except OSError:
            return False
