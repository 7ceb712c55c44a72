"""The kubelet: pods bound to real processes are terminated gracefully; readiness set by tests."""
import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from kube_emulator import kubelet, pods
from kube_emulator.fixtures import run_kube_api

_SETTLE_S = 10.0  # bounds the polling only

# A pod's "server": says READY once its SIGTERM handler is in place, then on SIGTERM works on for
# `drain_s` (the pod must stay meanwhile) and exits 0; with drain_s < 0 it ignores SIGTERM.
_SERVER = '''
import signal, sys, time
drain_s = float(sys.argv[1])
stop = []
signal.signal(signal.SIGTERM, signal.SIG_IGN if drain_s < 0 else lambda *_: stop.append(1))
print("READY", flush=True)
while not stop:
    time.sleep(0.01)
time.sleep(drain_s)
'''


@pytest.fixture()
def start_process():
    started = []

    def start(drain_s: float) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, '-c', _SERVER, str(drain_s)], stdout=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stdout.readline().strip() == 'READY'
        return proc
    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=5)
        proc.stdout.close()


def _pod_events(kube_api, name: str, since_rv: str, until: str = 'DELETED', count: int = 0) -> list[dict]:
    """The watch events of pod `name` after resourceVersion since_rv, up to the first `until` event
    (or the `count`th event)."""
    url = f'{kube_api.url}/api/v1/namespaces/default/pods?watch=true&resourceVersion={since_rv}&timeoutSeconds=10'
    events = []
    with urllib.request.urlopen(url, timeout=15) as stream:
        for line in stream:
            event = json.loads(line)
            if event['object']['metadata']['name'] == name:
                events.append(event)
                if event['type'] == until or len(events) == count:
                    break
    return events


def _ready(pod: dict) -> tuple[str, list[bool]]:
    ready = next(c['status'] for c in pod['status']['conditions'] if c['type'] == 'Ready')
    return ready, [c['ready'] for c in pod['status']['containerStatuses']]


def test_deleting_a_bound_pod_marks_it_sigterms_its_process_and_removes_it_when_it_exits(kube_api, start_process):
    proc = start_process(drain_s=0.3)
    pod = kube_api.add_pod('default', 'p0', {'app': 'x'}, '127.0.0.2', 30000, process=proc)
    code, deleted = kube_api.request('DELETE', '/api/v1/namespaces/default/pods/p0')
    assert code == 200 and deleted['metadata']['deletionTimestamp']
    assert deleted['metadata']['deletionGracePeriodSeconds'] == 30  # the default grace period
    code, terminating = kube_api.request('GET', '/api/v1/namespaces/default/pods/p0')
    assert code == 200 and _ready(terminating) == ('False', [False])  # still there, not ready
    assert kube_api.request('DELETE', '/api/v1/namespaces/default/pods/p0')[0] == 200  # a second DELETE
    assert kube_api.request('GET', '/api/v1/namespaces/default/pods/p0')[0] == 200  # ...changes nothing
    events = _pod_events(kube_api, 'p0', pod['metadata']['resourceVersion'])
    assert [e['type'] for e in events] == ['MODIFIED', 'DELETED']
    assert events[0]['object']['metadata']['deletionTimestamp'] and _ready(events[0]['object'])[0] == 'False'
    assert proc.wait(timeout=5) == 0  # it exited on its own after SIGTERM: not killed
    assert kube_api.request('GET', '/api/v1/namespaces/default/pods/p0')[0] == 404


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period(kube_api, start_process):
    proc = start_process(drain_s=-1)
    kube_api.add_pod('default', 'stubborn', {'app': 'x'}, '127.0.0.2', 30000, process=proc, grace_s=30)
    code, deleted = kube_api.request('DELETE', '/api/v1/namespaces/default/pods/stubborn',
                                     {'kind': 'DeleteOptions', 'apiVersion': 'v1', 'gracePeriodSeconds': 1})
    assert code == 200 and deleted['metadata']['deletionGracePeriodSeconds'] == 1  # the request's wins
    assert proc.wait(timeout=_SETTLE_S) == -signal.SIGKILL
    deadline = time.monotonic() + _SETTLE_S
    while kube_api.request('GET', '/api/v1/namespaces/default/pods/stubborn')[0] != 404:
        assert time.monotonic() < deadline, 'the pod outlived its killed process'
        time.sleep(0.02)


def test_a_forced_delete_removes_the_pod_at_once_and_kills_the_process(kube_api, start_process):
    proc = start_process(drain_s=5)
    kube_api.add_pod('default', 'p0', {'app': 'x'}, '127.0.0.2', 30000, process=proc)
    assert kube_api.request('DELETE', '/api/v1/namespaces/default/pods/p0?gracePeriodSeconds=0')[0] == 200
    assert kube_api.request('GET', '/api/v1/namespaces/default/pods/p0')[0] == 404
    assert proc.wait(timeout=5) == -signal.SIGKILL


@pytest.mark.parametrize('requested, pod_grace, expected', [
    (None, None, 30), (None, 7, 7), (3, 7, 3), (-1, 7, 7), (0, 7, 0),
], ids=['default', 'the-pods', 'the-requests', 'negative-is-the-pods', 'zero'])
def test_grace_period_s(requested, pod_grace, expected):
    pod = {'spec': {} if pod_grace is None else {'terminationGracePeriodSeconds': pod_grace}}
    assert pods.grace_period_s(pod, requested) == expected


def test_a_pod_without_a_process_is_deleted_at_once(kube_api):
    kube_api.add_pod('default', 'plain', {'app': 'x'}, '127.0.0.2', 30000)
    assert kube_api.request('DELETE', '/api/v1/namespaces/default/pods/plain')[0] == 200
    assert kube_api.request('GET', '/api/v1/namespaces/default/pods/plain')[0] == 404


def test_closing_the_emulator_kills_a_process_still_terminating(tmp_path, start_process):
    proc = start_process(drain_s=-1)
    with run_kube_api(tmp_path) as api:
        api.add_pod('default', 'p0', {'app': 'x'}, '127.0.0.2', 30000, process=proc)
        api.request('DELETE', '/api/v1/namespaces/default/pods/p0')
    assert proc.wait(timeout=5) == -signal.SIGKILL


def test_set_pod_ready_flips_the_conditions_and_container_statuses(kube_api):
    pod = kube_api.add_pod('default', 'p0', {'app': 'x'}, '127.0.0.2', 30000)
    unready = kube_api.set_pod_ready('default', 'p0', False)
    assert _ready(unready) == ('False', [False])
    assert next(c['status'] for c in unready['status']['conditions'] if c['type'] == 'ContainersReady') == 'False'
    assert _ready(kube_api.set_pod_ready('default', 'p0', True)) == ('True', [True])
    events = _pod_events(kube_api, 'p0', pod['metadata']['resourceVersion'], until='', count=2)
    assert [(e['type'], _ready(e['object'])[0]) for e in events] == [('MODIFIED', 'False'), ('MODIFIED', 'True')]


class _NeverExits:
    """A process whose poll() never returns a code, even after SIGKILL (a broken reader)."""

    def __init__(self) -> None:
        self.signals: list[int] = []

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)

    def poll(self) -> None:
        return None

    def kill(self) -> None:
        self.signals.append(signal.SIGKILL)


@pytest.mark.parametrize('grace_s', [0, 1])
def test_a_process_that_never_exits_after_sigkill_still_lets_its_pod_go(monkeypatch, grace_s):
    monkeypatch.setattr(kubelet, 'KILL_WAIT_S', 0.1)
    process, exited = _NeverExits(), []

    async def main():
        node = kubelet.Kubelet()
        node.bind(('default', 'p0'), process)
        node.terminate(('default', 'p0'), grace_s, lambda: exited.append(True))
        # before the fix the wait after SIGKILL had no end: this timed out
        await asyncio.wait_for(node._stopping[('default', 'p0')][1], grace_s + 5)
        return node.is_terminating(('default', 'p0'))
    assert asyncio.run(main()) is False
    assert exited == [True]
    assert process.signals[-1] == signal.SIGKILL
