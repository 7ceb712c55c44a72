"""PodWatch: the fleet's pods from the Kubernetes API (list, then watch), in a thread; every
change hands the new rotation (a set of worker URLs) to a callback on the gateway's event loop.

The only module that talks to the Kubernetes API. A watch that ends (server timeout), breaks or
expires (410 Gone) is followed by a fresh list and watch, so no event is missed for long.
"""
from __future__ import annotations

import asyncio
import logging
import math
import os
import threading
import time
from collections.abc import Callable

from gateway.discovery import label_selector, rotation

log = logging.getLogger(__name__)
WATCH_TIMEOUT_S = 60  # the API server ends each watch after this; we then list and watch again
RETRY_DELAY_S = 1.0


def api_client():
    """In a pod: the service account; elsewhere: KUBECONFIG (or ~/.kube/config)."""
    from kubernetes import (  # lazily: reading config at import would cost every test
        client,
        config,
    )
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    return config.new_client_from_config()


def failure_delay_s(is_gone: bool, was_gone: bool, failed_since_list: bool) -> float:
    """Seconds to wait before listing again after a list-and-watch failed."""
    if is_gone:
        # The watch expired (410): list again at once; a second 410 in a row (an expiry right
        # after a fresh list) waits, or consecutive ones would storm the API server.
        return RETRY_DELAY_S if was_gone else 0.0
    # After a good list, a failure (a cut watch) lists again at once, so no change is missed for
    # long; failures with no good list between wait: no hot loop.
    return RETRY_DELAY_S if failed_since_list else 0.0


class PodWatch:
    def __init__(self, fleet: str, namespace: str, label: str,
                 on_rotation: Callable[[set[str]], None], loop: asyncio.AbstractEventLoop) -> None:
        self.namespace, self.selector = namespace, label_selector(fleet, label)
        self.on_rotation, self.loop = on_rotation, loop
        self._stopping = threading.Event()
        self._listed_at_s = -math.inf  # when a list last succeeded
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end; it is a daemon, so a watch blocked on a quiet stream never
        holds the process (it ends at the next event or its timeout)."""
        self._stopping.set()

    def _run(self) -> None:
        from kubernetes import client
        api = api_client()
        core = client.CoreV1Api(api)
        last_failure_s = -math.inf
        was_gone = False  # the last list-and-watch ended in a 410
        while not self._stopping.is_set():
            try:
                self._list_and_watch(api, core)
                was_gone = False
            except Exception as error:  # noqa: BLE001 - an API outage must not end discovery
                is_gone = getattr(error, "status", None) == 410
                delay_s = failure_delay_s(is_gone, was_gone, last_failure_s > self._listed_at_s)
                was_gone = is_gone
                if not is_gone:
                    last_failure_s = time.monotonic()
                if delay_s or not is_gone:
                    detail = (f"{error.status} {error.reason}" if hasattr(error, "status")
                              else repr(error))  # an ApiException's str() is many lines
                    log.warning("pod watch on %s/%s failed (%s); again in %s s", self.namespace,
                                self.selector, detail, delay_s)
                self._stopping.wait(delay_s)
        api.close()

    def _list_and_watch(self, api, core) -> None:
        from kubernetes import watch
        listed = core.list_namespaced_pod(self.namespace, label_selector=self.selector)
        self._listed_at_s = time.monotonic()
        pods = {pod.metadata.name: api.sanitize_for_serialization(pod) for pod in listed.items}
        self._publish(pods)
        stream = watch.Watch().stream(
            core.list_namespaced_pod, self.namespace, label_selector=self.selector,
            resource_version=listed.metadata.resource_version, timeout_seconds=WATCH_TIMEOUT_S,
            _request_timeout=WATCH_TIMEOUT_S + 10)
        for event in stream:
            if self._stopping.is_set():
                return
            pod = api.sanitize_for_serialization(event["object"])
            name = (pod.get("metadata") or {}).get("name")
            if event["type"] == "DELETED":
                pods.pop(name, None)
            elif event["type"] in ("ADDED", "MODIFIED") and name:
                pods[name] = pod
            self._publish(pods)

    def _publish(self, pods: dict) -> None:
        urls = rotation(pods)
        self.loop.call_soon_threadsafe(self.on_rotation, urls)
