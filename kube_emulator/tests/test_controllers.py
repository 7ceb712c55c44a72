"""Finalizers, garbage collection and the fake Deployment controller, seen through the kubernetes client."""
import time

from kubernetes.client import ApiException

_SETTLE_S = 5.0  # the controllers act within milliseconds; this only bounds the polling


def _eventually(read, predicate):
    """Poll read() until predicate(value) holds (bounded); returns the last value."""
    deadline = time.monotonic() + _SETTLE_S
    value = read()
    while not predicate(value) and time.monotonic() < deadline:
        time.sleep(0.02)
        value = read()
    return value


def _gone(read):
    def attempt():
        try:
            read()
            return False
        except ApiException as e:
            return e.status == 404
    return _eventually(attempt, bool)


def _deployment(name: str, replicas: int) -> dict:
    labels = {'app': name}
    return {'apiVersion': 'apps/v1', 'kind': 'Deployment', 'metadata': {'name': name, 'labels': labels},
            'spec': {'replicas': replicas, 'selector': {'matchLabels': labels}, 'template': {
                'metadata': {'labels': labels}, 'spec': {'containers': [{'name': 'main', 'image': 'x:1'}]}}}}


def test_delete_with_finalizer_waits_until_the_last_one_is_removed(core):
    core.create_namespaced_config_map('default', {'metadata': {'name': 'held', 'finalizers': ['a/x', 'b/y']}})
    core.delete_namespaced_config_map('held', 'default')
    marked = core.read_namespaced_config_map('held', 'default')
    core.patch_namespaced_config_map('held', 'default', {'metadata': {'finalizers': ['b/y']}})
    still_there = core.read_namespaced_config_map('held', 'default')
    core.patch_namespaced_config_map('held', 'default', {'metadata': {'finalizers': None}})
    assert marked.metadata.deletion_timestamp is not None and still_there.metadata.finalizers == ['b/y']
    assert _gone(lambda: core.read_namespaced_config_map('held', 'default'))


def test_deleting_an_owner_deletes_its_dependents_recursively(kube_api, core, apps):
    owner = apps.create_namespaced_deployment('default', _deployment('web', 1))
    owner_dict = kube_api.client().sanitize_for_serialization(owner)
    pod = kube_api.add_pod('default', 'web-0', {'app': 'web'}, '127.0.0.2', 8000, owner=owner_dict)
    grandchild_ref = {'apiVersion': 'v1', 'kind': 'Pod', 'name': 'web-0', 'uid': pod['metadata']['uid']}
    core.create_namespaced_config_map('default', {'metadata': {'name': 'of-pod', 'ownerReferences': [grandchild_ref]}})
    core.create_namespaced_config_map('default', {'metadata': {'name': 'unowned'}})
    apps.delete_namespaced_deployment('web', 'default')
    assert _gone(lambda: core.read_namespaced_pod('web-0', 'default'))
    assert _gone(lambda: core.read_namespaced_config_map('of-pod', 'default'))
    assert core.read_namespaced_config_map('unowned', 'default').metadata.name == 'unowned'


def test_orphan_propagation_keeps_dependents(kube_api, core, apps):
    created = apps.create_namespaced_deployment('default', _deployment('web', 1))
    owner = kube_api.client().sanitize_for_serialization(created)
    kube_api.add_pod('default', 'web-0', {'app': 'web'}, '127.0.0.2', 8000, owner=owner)
    apps.delete_namespaced_deployment('web', 'default', propagation_policy='Orphan')
    time.sleep(0.1)  # give a (wrong) collection the chance to happen
    assert core.read_namespaced_pod('web-0', 'default').metadata.name == 'web-0'


def test_deployment_controller_reports_every_replica_ready(apps):
    apps.create_namespaced_deployment('default', _deployment('web', 3))
    apps.patch_namespaced_deployment_scale('web', 'default', {'spec': {'replicas': 2}})
    status = _eventually(lambda: apps.read_namespaced_deployment('web', 'default'),
                         lambda d: d.status.observed_generation == d.metadata.generation).status
    assert (status.replicas, status.ready_replicas, status.available_replicas, status.updated_replicas) == (2, 2, 2, 2)
    assert {c.type: c.status for c in status.conditions} == {'Available': 'True', 'Progressing': 'True'}


def test_deployment_controller_creates_no_pods(core, apps):
    apps.create_namespaced_deployment('default', _deployment('web', 3))
    _eventually(lambda: apps.read_namespaced_deployment('web', 'default'), lambda d: d.status.ready_replicas == 3)
    assert core.list_namespaced_pod('default').items == []


def test_kubectl_rollout_status_passes(kube_api, apps):
    apps.create_namespaced_deployment('default', _deployment('web', 2))
    kube_api.kubectl('set', 'image', 'deployment/web', 'main=x:2')
    result = kube_api.kubectl('rollout', 'status', 'deployment/web', '--timeout=10s')
    assert 'successfully rolled out' in result.stdout


def test_deleting_a_namespace_deletes_its_objects(core):
    core.create_namespace({'metadata': {'name': 'tmp'}})
    core.create_namespaced_config_map('tmp', {'metadata': {'name': 'a'}})
    core.delete_namespace('tmp')
    assert _gone(lambda: core.read_namespaced_config_map('a', 'tmp'))
