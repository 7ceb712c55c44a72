"""pytest fixtures: `kube_api`, a KubeEmulator served on 127.0.0.1 from a background thread.

The emulator runs in its own thread and event loop, so sync tests, async tests, kopf (in the test's
loop or a subprocess) and kubectl all reach it over HTTP alike. Teardown ends watches, stops the
server and joins the thread; API clients made with `.client()` are closed too.
"""
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kube_emulator import objects, pods
from kube_emulator.emulator import KubeEmulator
from kube_emulator.faults import FaultRule, LoggedRequest
from kube_emulator.kmock_seam import Server
from kube_emulator.kubelet import Process

__all__ = ['kube_api', 'KubeApi', 'run_kube_api']

_START_TIMEOUT_S = 10.0
_KUBECTL = Path(sys.executable).parent / 'kubectl'


def write_kubeconfig(path: Path, url: str) -> Path:
    """A kubeconfig for the emulator: plain http, a dummy token, namespace `default`."""
    path.write_text(json.dumps({
        'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'emulator', 'preferences': {},
        'clusters': [{'name': 'emulator', 'cluster': {'server': url}}],
        'users': [{'name': 'tester', 'user': {'token': 'any-token'}}],
        'contexts': [{'name': 'emulator',
                      'context': {'cluster': 'emulator', 'user': 'tester', 'namespace': 'default'}}],
    }, indent=2))
    return path


class _ServingThread:
    """Runs `async with emulator, kmock.Server(emulator)` in a thread until stop()."""

    def __init__(self, emulator: KubeEmulator):
        self.emulator = emulator
        self.port: int | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name='kube-emulator', daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(_START_TIMEOUT_S) or self.port is None:
            raise RuntimeError(f'the emulator did not start: {self._error!r}')

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(_START_TIMEOUT_S)
        if self._thread.is_alive():
            raise RuntimeError('the emulator thread did not stop')

    def wake_watches(self) -> None:
        """Let idle watch streams re-check their state now (from any thread)."""
        self._loop.call_soon_threadsafe(self.emulator.store.wake_all)

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as e:  # reported to the starting thread
            self._error = e
            self._ready.set()
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with self.emulator, Server(self.emulator, host='127.0.0.1') as server:
            self.port = server.port
            self._ready.set()
            await self._stop.wait()
            self.emulator.close()  # end the watches first, or the server waits for them
            await asyncio.sleep(0.05)


class KubeApi:
    """A running emulator and the ways to talk to it: kubectl, a kubernetes client, raw HTTP."""

    def __init__(self, emulator: KubeEmulator, url: str, kubeconfig: Path, cache_dir: Path,
                 wake_watches: Callable[[], None] = lambda: None):
        self.emulator = emulator  # NOTE: lives on another thread's loop: inspect it through the API
        self._wake_watches = wake_watches
        self.url = url
        self.kubeconfig = kubeconfig
        self.env = dict(os.environ, KUBECONFIG=str(kubeconfig), KUBECACHEDIR=str(cache_dir))
        self._clients: list[Any] = []

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
        """Run the venv's kubectl against the emulator; text output; raises on failure if check."""
        kubectl = str(_KUBECTL) if _KUBECTL.exists() else shutil.which('kubectl') or 'kubectl'
        result = subprocess.run([kubectl, *args], input=input, env=self.env, capture_output=True, text=True,
                                timeout=timeout_s)
        if check and result.returncode != 0:
            raise AssertionError(f'kubectl {" ".join(args)} failed ({result.returncode}):\n'
                                 f'{result.stdout}\n{result.stderr}')
        return result

    def client(self) -> Any:
        """A kubernetes.client.ApiClient for this emulator (global kubernetes config untouched)."""
        import kubernetes  # lazily: importing it reads KUBECONFIG, which the caller may set first
        api = kubernetes.config.new_client_from_config(config_file=str(self.kubeconfig))
        self._clients.append(api)
        return api

    def request(self, method: str, path: str, body: Any = None,
                content_type: str = 'application/json') -> tuple[int, Any]:
        """Raw HTTP to the emulator: (status code, decoded JSON body)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={'Content-Type': content_type, 'Accept': 'application/json'})
        try:
            with urllib.request.urlopen(req, timeout=10) as response:
                return response.status, json.loads(response.read() or b'null')
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b'null')

    def path_for(self, api_version: str, kind: str, namespace: str | None = None, name: str | None = None) -> str:
        """The URL path of a kind's collection (or of one object), resolved through discovery."""
        status, found = self.request('GET', f'/api/{api_version}' if '/' not in api_version else f'/apis/{api_version}')
        if status != 200:
            raise LookupError(f'{api_version} is not served: {found}')
        entry = next((r for r in found['resources'] if r['kind'] == kind and '/' not in r['name']), None)
        if entry is None:
            raise LookupError(f'{kind} is not served in {api_version}')
        prefix = f'/api/{api_version}' if '/' not in api_version else f'/apis/{api_version}'
        if entry['namespaced']:
            prefix += f'/namespaces/{namespace or "default"}'
        return f'{prefix}/{entry["name"]}' + (f'/{name}' if name else '')

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """POST an object (namespace from its metadata, else default); returns the stored object."""
        path = self.path_for(obj['apiVersion'], obj['kind'], (obj.get('metadata') or {}).get('namespace'))
        status, created = self.request('POST', path, obj)
        if status != 201:
            raise AssertionError(f'creating {obj["kind"]} failed ({status}): {created}')
        return created

    def apply_file(self, path: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
        """`kubectl apply --validate=false -f path` (no OpenAPI here, so no client-side validation)."""
        return self.kubectl('apply', '--validate=false', '-f', str(path))

    def add_pod(self, namespace: str, name: str, labels: dict[str, str], pod_ip: str, port: int,
                phase: str = 'Running', ready: bool = True, owner: dict[str, Any] | None = None,
                process: Process | None = None, grace_s: int | None = None) -> dict[str, Any]:
        """Play the kubelet: a Pod with a container port `http` and status podIP/phase/Ready.

        owner: an object (with apiVersion, kind, metadata.name/uid) to put in ownerReferences.
        process: the pod's server (e.g. a subprocess.Popen listening on pod_ip:port), bound as by
        bind_process. grace_s: spec.terminationGracePeriodSeconds (None: unset, 30 s).
        """
        meta: dict[str, Any] = {'name': name, 'namespace': namespace, 'labels': dict(labels)}
        if owner is not None:
            meta['ownerReferences'] = [{'apiVersion': owner['apiVersion'], 'kind': owner['kind'], 'controller': True,
                                        'name': owner['metadata']['name'], 'uid': owner['metadata']['uid']}]
        spec: dict[str, Any] = {'containers': [
            {'name': 'server', 'image': 'scoring-fleet:test', 'ports': [{'name': 'http', 'containerPort': port}]}]}
        if grace_s is not None:
            spec['terminationGracePeriodSeconds'] = grace_s
        pod = self.create({'apiVersion': 'v1', 'kind': 'Pod', 'metadata': meta, 'spec': spec})
        truth = 'True' if ready else 'False'
        status = {
            'phase': phase, 'podIP': pod_ip, 'podIPs': [{'ip': pod_ip}], 'hostIP': '127.0.0.1',
            'startTime': pod['metadata']['creationTimestamp'],
            'conditions': [{'type': kind, 'status': truth, 'lastTransitionTime': pod['metadata']['creationTimestamp']}
                           for kind in ('PodScheduled', 'Initialized', 'ContainersReady', 'Ready')],
            'containerStatuses': [{'name': 'server', 'ready': ready, 'restartCount': 0, 'image': 'scoring-fleet:test',
                                   'imageID': '', 'started': phase == 'Running', 'state': {'running': {}}}],
        }
        patched = self._patch_pod_status(namespace, name, status)
        if process is not None:
            self.bind_process(namespace, name, process)
        return patched

    def bind_process(self, namespace: str, name: str, process: Process) -> None:
        """Make `process` the pod's: deleting the pod (a client, a scale-down, garbage collection)
        then sets deletionTimestamp, marks it not ready, SIGTERMs the process and removes the pod
        when it exits (SIGKILL after the grace period). Unbound pods go at once, as before."""
        code, found = self.request('GET', f'/api/v1/namespaces/{namespace}/pods/{name}')
        if code != 200:
            raise AssertionError(f'no pod {namespace}/{name} to bind ({code}): {found}')
        self.emulator.cluster.kubelet.bind((namespace, name), process)

    def set_pod_ready(self, namespace: str, name: str, ready: bool) -> dict[str, Any]:
        """Mark a pod ready or not (Ready, ContainersReady, containerStatuses[].ready) via /status."""
        code, pod = self.request('GET', f'/api/v1/namespaces/{namespace}/pods/{name}')
        if code != 200:
            raise AssertionError(f'no pod {namespace}/{name} ({code}): {pod}')
        status = pods.with_readiness(pod, ready, objects.now_rfc3339(self.emulator.clock()))['status']
        readiness = {key: status[key] for key in ('conditions', 'containerStatuses')}
        return self._patch_pod_status(namespace, name, readiness)

    def run_pods(self, starter: Callable[[dict[str, Any]], None]) -> None:
        """From now on Deployments create their pods and roll them on a template change (maxSurge,
        maxUnavailable, readiness: rollout.py). Each new pod (Pending, no IP) is passed to
        `starter(pod)` on a thread of its own, which plays the kubelet's start: run the pod's
        server, then `start_pod(...)`. Call it before the Deployments are written."""
        def start_in_thread(pod: dict[str, Any]) -> None:
            threading.Thread(target=starter, args=(pod,), name=f"start-{pod['metadata']['name']}",
                             daemon=True).start()
        self.emulator.cluster.pod_starter = start_in_thread

    def start_pod(self, namespace: str, name: str, pod_ip: str, process: Process | None = None,
                  ready: bool = True) -> dict[str, Any]:
        """A pending pod started (the kubelet's part): Running on pod_ip, ready or not, and bound
        to `process` (graceful termination, as bind_process)."""
        code, pod = self.request('GET', f'/api/v1/namespaces/{namespace}/pods/{name}')
        if code != 200:
            raise AssertionError(f'no pod {namespace}/{name} to start ({code}): {pod}')
        if process is not None:
            self.bind_process(namespace, name, process)
        now = objects.now_rfc3339(self.emulator.clock())
        containers = (pod.get('spec') or {}).get('containers') or []
        status = {
            'phase': 'Running', 'podIP': pod_ip, 'podIPs': [{'ip': pod_ip}], 'hostIP': '127.0.0.1',
            'startTime': now,
            'conditions': [{'type': kind, 'status': 'True', 'lastTransitionTime': now}
                           for kind in ('PodScheduled', 'Initialized')],
            'containerStatuses': [{'name': c.get('name'), 'ready': ready, 'restartCount': 0,
                                   'image': c.get('image', ''), 'imageID': '', 'started': True,
                                   'state': {'running': {'startedAt': now}}} for c in containers],
        }
        return self._patch_pod_status(namespace, name, pods.with_readiness({'status': status}, ready, now)['status'])

    def _patch_pod_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        code, patched = self.request('PATCH', f'/api/v1/namespaces/{namespace}/pods/{name}/status',
                                     {'status': status}, content_type='application/merge-patch+json')
        if code != 200:
            raise AssertionError(f'setting the status of pod {name} failed ({code}): {patched}')
        return patched

    # --- fault injection (kube_emulator/faults.py) ---

    def inject(self, method: str | None = None, path_regex: str = '', status: int = 503,
               times: int | None = 1, body_regex: str | None = None) -> FaultRule:
        """Answer the next `times` requests (None: all until clear_faults) whose method matches
        (None: any), whose path+query matches `path_regex` and, when given, whose body matches
        `body_regex` (re.search) with a metav1 Status error of `status` instead of serving them.
        Returns the rule; `.hits` counts its uses."""
        return self.emulator.faults.inject(method, path_regex, status, times, body_regex)

    def clear_faults(self) -> None:
        self.emulator.faults.clear()

    def drop_watches(self) -> None:
        """Cut every open watch stream now (connection closed mid-body); clients must re-watch."""
        self.emulator.faults.drop_watches()
        self._wake_watches()

    def requests(self, since_s: float = 0.0, method: str | None = None,
                 path_regex: str | None = None) -> list[LoggedRequest]:
        """Requests the emulator received at or after time.monotonic() value `since_s`."""
        return self.emulator.faults.requests(since_s, method, path_regex)

    def close(self) -> None:
        for api in self._clients:
            api.close()
        self._clients.clear()


@contextlib.contextmanager
def run_kube_api(workdir: Path) -> Iterator[KubeApi]:
    """Serve a fresh emulator until the block ends; kubeconfig and kubectl cache go into workdir.

    Several may run at once; nest them (kmock.Server patches aiohttp's resolver class-wide, so they
    must stop in reverse order, which `with` guarantees).
    """
    serving = _ServingThread(KubeEmulator())
    serving.start()
    try:
        url = f'http://127.0.0.1:{serving.port}'
        cache_dir = workdir / 'kubecache'
        cache_dir.mkdir(parents=True, exist_ok=True)
        api = KubeApi(serving.emulator, url, write_kubeconfig(workdir / 'kubeconfig', url), cache_dir,
                      wake_watches=serving.wake_watches)
        try:
            yield api
        finally:
            api.close()
    finally:
        serving.stop()


@pytest.fixture()
def kube_api(tmp_path: Path) -> Iterator[KubeApi]:
    """A fresh emulator per test, with a kubeconfig and a kubectl cache dir in tmp_path."""
    with run_kube_api(tmp_path) as api:
        yield api
