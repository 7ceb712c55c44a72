"""The Deployment controller with pods on (KubeApi.run_pods): a table of the rolling update's pure
steps (Kubernetes' fenceposts and order), then Deployments through the API: pods created for the
template, a template change rolled within maxSurge / maxUnavailable and waiting for readiness."""
import threading
import time

import pytest

from kube_emulator.rollout import HASH_LABEL, Step, deployment_status, fenceposts, step, template_hash

_SETTLE_S = 10.0


def _deployment(replicas=3, surge=None, unavailable=None, image='x:2'):
    rolling = {k: v for k, v in (('maxSurge', surge), ('maxUnavailable', unavailable)) if v is not None}
    return {'metadata': {'name': 'web', 'namespace': 'default', 'uid': 'u1', 'generation': 2}, 'spec': {
        'replicas': replicas, 'selector': {'matchLabels': {'app': 'web'}},
        'strategy': {'type': 'RollingUpdate', 'rollingUpdate': rolling},
        'template': {'metadata': {'labels': {'app': 'web'}},
                     'spec': {'containers': [{'name': 'main', 'image': image}]}}}}


NEW = template_hash(_deployment())
OLD = template_hash(_deployment(image='x:1'))


def _pod(name, template=OLD, ready=True, terminating=False):
    meta = {'name': name, 'labels': {'app': 'web', HASH_LABEL: template},
            'creationTimestamp': '2026-01-01T00:00:00Z'}
    if terminating:
        meta['deletionTimestamp'] = '2026-01-01T00:00:09Z'
    return {'metadata': meta, 'spec': {}, 'status': {
        'phase': 'Running', 'containerStatuses': [{'ready': ready, 'restartCount': 0}],
        'conditions': [{'type': 'Ready', 'status': str(ready), 'lastTransitionTime': '2026-01-01T00:00:00Z'}]}}


def _old(n, ready=True):
    return [_pod(f'old-{i}', ready=ready) for i in range(n)]


STEPS = {
    # name: (deployment, pods, pods to create, names deleted)
    'fresh-creates-all': (_deployment(), [], 3, []),
    'surge-one-first': (_deployment(surge=1, unavailable=0), _old(3), 1, []),
    'new-not-ready-waits': (_deployment(surge=1, unavailable=0), [*_old(3), _pod('n0', NEW, ready=False)], 0, []),
    'new-ready-one-old-goes': (_deployment(surge=1, unavailable=0), [*_old(3), _pod('n0', NEW)], 0, ['old-2']),
    'terminating-do-not-count': (_deployment(surge=1, unavailable=0),
                                 [*_old(2), _pod('old-2', terminating=True), _pod('n0', NEW)], 1, []),
    'no-surge-old-goes-first': (_deployment(surge=0, unavailable=1), _old(3), 0, ['old-2']),
    'no-surge-then-one-new': (_deployment(surge=0, unavailable=1), _old(2), 1, []),
    # a not-ready old pod goes first, but like any other only within the fenceposts (Kubernetes'
    # maxScaledDown: all pods - minAvailable - new pods not ready)
    'not-ready-old-waits-too': (_deployment(surge=1, unavailable=0), [*_old(2), _pod('sick', ready=False)], 1, []),
    'not-ready-old-go-first': (_deployment(surge=1, unavailable=0),
                               [*_old(2), _pod('sick', ready=False), _pod('n0', NEW)], 0, ['sick']),
    'default-25-percent': (_deployment(replicas=4), _old(4), 1, ['old-3']),
    'done': (_deployment(), [_pod(f'n{i}', NEW) for i in range(3)], 0, []),
}


@pytest.mark.parametrize('deployment, pods, create, deleted', STEPS.values(), ids=STEPS.keys())
def test_step(deployment, pods, create, deleted):
    assert step(deployment, pods) == Step(create, tuple(p for p in pods if p['metadata']['name'] in deleted))


@pytest.mark.parametrize('surge, unavailable, replicas, expected', [
    (1, 0, 3, (1, 0)), ('25%', '25%', 3, (1, 0)), ('50%', '50%', 3, (2, 1)), (0, 0, 3, (0, 1)),
    (None, None, 8, (2, 2)), ('0%', '100%', 3, (0, 3)),
], ids=['ints', 'quarter-of-3', 'half-of-3', 'both-zero', 'defaults', 'all-unavailable'])
def test_fenceposts_round_surge_up_and_unavailable_down(surge, unavailable, replicas, expected):
    assert fenceposts(_deployment(replicas, surge, unavailable)) == expected


def test_status_counts_the_pods_themselves():
    pods = [*_old(1), _pod('n0', NEW), _pod('n1', NEW, ready=False), _pod('old-9', terminating=True)]
    status = deployment_status(_deployment(), pods)
    assert (status['replicas'], status['updatedReplicas'], status['readyReplicas'],
            status['unavailableReplicas'], status['observedGeneration']) == (3, 2, 2, 1, 2)


# --- through the API ---

class Pods:
    """run_pods' starter: each new pod started (no process) and ready after `delay_s`; and a
    record of (live, ready, template hashes) every 10 ms."""

    def __init__(self, kube_api, delay_s=0.2):
        self.kube_api, self.delay_s = kube_api, delay_s
        self.started: list[str] = []
        self.history: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._record, daemon=True)

    def start(self, pod):
        name = pod['metadata']['name']
        self.started.append(name)
        self.kube_api.start_pod('default', name, '127.0.0.2', ready=False)
        time.sleep(self.delay_s)  # the server loading its model
        self.kube_api.set_pod_ready('default', name, True)

    def live(self):
        items = self.kube_api.request('GET', '/api/v1/namespaces/default/pods?labelSelector=app%3Dweb')[1]['items']
        return [p for p in items if not p['metadata'].get('deletionTimestamp')]

    def _record(self):
        while not self._stop.wait(0.01):
            live = self.live()
            ready = [p for p in live if any(c['type'] == 'Ready' and c['status'] == 'True'
                                            for c in (p.get('status') or {}).get('conditions') or [])]
            self.history.append((len(live), len(ready)))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_):
        self._stop.set()
        self._thread.join()


def _api_object(deployment):
    return dict(deployment, apiVersion='apps/v1', kind='Deployment', metadata={'name': 'web'})


def _until(read, expected):
    deadline = time.monotonic() + _SETTLE_S
    while (value := read()) != expected and time.monotonic() < deadline:
        time.sleep(0.02)
    return value


def _hashes(pods, ready=True):
    return sorted(p['metadata']['labels'][HASH_LABEL] for p in pods.live()
                  if not ready or ((p.get('status') or {}).get('containerStatuses') or [{}])[0].get('ready'))


@pytest.mark.parametrize('surge, unavailable, max_live, min_ready', [(1, 0, 4, 3), (0, 1, 3, 2)],
                         ids=['surge-keeps-capacity', 'no-surge-keeps-gpus'])
def test_a_template_change_rolls_the_pods_within_the_strategy(kube_api, surge, unavailable, max_live, min_ready):
    with Pods(kube_api) as pods:
        kube_api.run_pods(pods.start)
        created = kube_api.create(_api_object(_deployment(3, surge, unavailable, image='x:1')))
        first = template_hash(created)
        assert _until(lambda: _hashes(pods), [first] * 3) == [first] * 3
        begun = len(pods.history)
        code, body = kube_api.request(
            'PATCH', '/apis/apps/v1/namespaces/default/deployments/web',
            {'spec': {'template': {'spec': {'containers': [{'name': 'main', 'image': 'x:2'}]}}}},
            content_type='application/merge-patch+json')
        assert code == 200, body
        second = template_hash(body)
        assert _until(lambda: _hashes(pods, ready=False), [second] * 3) == [second] * 3
        assert _until(lambda: _hashes(pods), [second] * 3) == [second] * 3
    during = pods.history[begun:]
    assert max(live for live, _ in during) <= max_live
    assert min(ready for _, ready in during) >= min_ready
    assert len(pods.started) == 6  # three of each template, one at a time
    assert _until(lambda: kube_api.request('GET', '/apis/apps/v1/namespaces/default/deployments/web')[1]
                  ['status']['updatedReplicas'], 3) == 3


def test_without_run_pods_a_deployment_creates_no_pods(kube_api):
    kube_api.create(_api_object(_deployment(2)))
    time.sleep(0.1)
    items = kube_api.request('GET', '/api/v1/namespaces/default/pods')[1]['items']
    assert items == []
