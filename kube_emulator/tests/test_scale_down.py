"""The ReplicaSet controller's scale-down: which pods go first (a table of the pure ranking), and
a Deployment scaled down through the API deleting its surplus pods, gracefully where bound."""
import subprocess
import sys
import time

import pytest

from kube_emulator.pods import DELETION_COST, pods_to_delete

_SETTLE_S = 5.0


def _pod(name: str, cost: str | None = None, ready: bool = True, phase: str = 'Running',
         created: str = '2026-01-01T00:00:00Z', ready_since: str = '2026-01-01T00:00:00Z', restarts: int = 0,
         node: str | None = None, terminating: bool = False) -> dict:
    meta = {'name': name, 'creationTimestamp': created, 'annotations': {DELETION_COST: cost} if cost else {}}
    if terminating:
        meta['deletionTimestamp'] = '2026-01-01T00:00:09Z'
    return {'metadata': meta, 'spec': {'nodeName': node} if node else {}, 'status': {
        'phase': phase, 'containerStatuses': [{'ready': ready, 'restartCount': restarts}],
        'conditions': [{'type': 'Ready', 'status': str(ready), 'lastTransitionTime': ready_since}]}}


RANKINGS = {
    # name: (pods, replicas, the names deleted, first choice first)
    'lower-cost-first': ([_pod('a', '10'), _pod('b', '-5'), _pod('c', '3')], 1, ['b', 'c']),
    'missing-cost-is-zero': ([_pod('a', '1'), _pod('b'), _pod('c', '-1')], 2, ['c']),
    'unparsable-cost-is-zero': ([_pod('a', 'lots'), _pod('b', '1')], 1, ['a']),
    # Kubernetes ranks readiness before cost: a not-ready pod goes first even at a high cost.
    'not-ready-before-ready': ([_pod('a', '-100'), _pod('b', '100', ready=False)], 1, ['b']),
    'pending-before-running': ([_pod('a', '-1'), _pod('b', phase='Pending', ready=False),
                                _pod('c', ready=False)], 2, ['b']),
    'unscheduled-before-scheduled': ([_pod('a', node='n1'), _pod('b', '5')], 1, ['b']),
    'ready-for-less-time-first': ([_pod('a', ready_since='2026-01-01T00:00:05Z'), _pod('b')], 1, ['a']),
    'more-restarts-first': ([_pod('a'), _pod('b', restarts=3)], 1, ['b']),
    'newer-first': ([_pod('a', created='2026-01-01T00:00:07Z'), _pod('b')], 1, ['a']),
    'ties-go-to-the-greater-name': ([_pod('x-0'), _pod('x-1'), _pod('x-2')], 1, ['x-2', 'x-1']),
    'terminating-pods-do-not-count': ([_pod('a'), _pod('b', terminating=True), _pod('c', '1')], 1, ['a']),
    'no-surplus': ([_pod('a'), _pod('b')], 2, []),
    'to-zero': ([_pod('a', '1'), _pod('b')], 0, ['b', 'a']),
}


@pytest.mark.parametrize('pods, replicas, deleted', RANKINGS.values(), ids=RANKINGS.keys())
def test_pods_to_delete(pods, replicas, deleted):
    assert [p['metadata']['name'] for p in pods_to_delete(pods, replicas)] == deleted


def _deployment(kube_api, name: str, replicas: int) -> dict:
    labels = {'app': name}
    return kube_api.create({'apiVersion': 'apps/v1', 'kind': 'Deployment', 'metadata': {'name': name}, 'spec': {
        'replicas': replicas, 'selector': {'matchLabels': labels}, 'template': {
            'metadata': {'labels': labels}, 'spec': {'containers': [{'name': 'main', 'image': 'x:1'}]}}}})


def _scale(kube_api, name: str, replicas: int) -> None:
    code, body = kube_api.request('PATCH', f'/apis/apps/v1/namespaces/default/deployments/{name}/scale',
                                  {'spec': {'replicas': replicas}}, content_type='application/merge-patch+json')
    assert code == 200, body


def _pod_names(kube_api, label: str) -> set[str]:
    return {p['metadata']['name'] for p in kube_api.request('GET', f'/api/v1/namespaces/default/pods'
                                                                   f'?labelSelector=app%3D{label}')[1]['items']}


def _eventually(read, expected):
    deadline = time.monotonic() + _SETTLE_S
    while (value := read()) != expected and time.monotonic() < deadline:
        time.sleep(0.02)
    return value


def _set_cost(kube_api, pod: str, cost: int) -> None:
    code, body = kube_api.request('PATCH', f'/api/v1/namespaces/default/pods/{pod}',
                                  {'metadata': {'annotations': {DELETION_COST: str(cost)}}},
                                  content_type='application/merge-patch+json')
    assert code == 200, body


def test_a_scale_down_deletes_the_lowest_cost_pods(kube_api):
    _deployment(kube_api, 'web', 5)
    for i, cost in enumerate([30, -2, 10, 0, 20]):
        kube_api.add_pod('default', f'web-{i}', {'app': 'web'}, f'127.0.0.{i + 2}', 30000)
        _set_cost(kube_api, f'web-{i}', cost)
    kube_api.add_pod('default', 'other', {'app': 'other'}, '127.0.0.9', 30000)  # not selected
    _scale(kube_api, 'web', 3)
    assert _eventually(lambda: _pod_names(kube_api, 'web'), {'web-0', 'web-2', 'web-4'}) == {'web-0', 'web-2', 'web-4'}
    assert _pod_names(kube_api, 'other') == {'other'}


def test_a_scale_up_or_an_extra_pod_deletes_nothing(kube_api):
    _deployment(kube_api, 'web', 1)
    for i in range(3):  # more pods than replicas: tests own pod creation, the emulator leaves them
        kube_api.add_pod('default', f'web-{i}', {'app': 'web'}, f'127.0.0.{i + 2}', 30000)
    _scale(kube_api, 'web', 2)
    time.sleep(0.1)  # the controller acts within milliseconds; nothing may have gone
    assert _pod_names(kube_api, 'web') == {'web-0', 'web-1', 'web-2'}


def test_a_scale_down_terminates_a_bound_pod_gracefully(kube_api):
    _deployment(kube_api, 'web', 2)
    # A process that exits 0 on SIGTERM (Python's default handler would exit -15).
    proc = subprocess.Popen([sys.executable, '-c', 'import signal, sys, time\n'
                             'signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\nprint(1, flush=True)\n'
                             'time.sleep(30)'], stdout=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()
        kube_api.add_pod('default', 'web-0', {'app': 'web'}, '127.0.0.2', 30000, process=proc)
        kube_api.add_pod('default', 'web-1', {'app': 'web'}, '127.0.0.3', 30000)
        _set_cost(kube_api, 'web-1', 5)
        _scale(kube_api, 'web', 1)
        assert proc.wait(timeout=_SETTLE_S) == 0
        assert _eventually(lambda: _pod_names(kube_api, 'web'), {'web-1'}) == {'web-1'}
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
