"""The emulator through the real `kubernetes` client: CRUD, errors, patches, subresources, lists, watches."""
import json
import threading
import urllib.request

import kubernetes
import pytest
from kubernetes.client import ApiException


def _deployment(name: str, replicas: int = 1, labels: dict[str, str] | None = None) -> dict:
    labels = labels or {'app': name}
    return {
        'apiVersion': 'apps/v1', 'kind': 'Deployment', 'metadata': {'name': name, 'labels': labels},
        'spec': {'replicas': replicas, 'selector': {'matchLabels': labels}, 'template': {
            'metadata': {'labels': labels},
            'spec': {'containers': [{'name': 'main', 'image': 'x:1', 'env': [{'name': 'A', 'value': '1'}]}]}}},
    }


def _configmap(name: str, labels: dict[str, str] | None = None, namespace: str = 'default') -> dict:
    return {'apiVersion': 'v1', 'kind': 'ConfigMap', 'data': {'k': 'v'},
            'metadata': {'name': name, 'namespace': namespace, 'labels': labels or {}}}


_WATCH_BOUND_S = 5  # the server ends a watch after this, so that a missing event fails instead of hanging


def _first(events, count: int) -> list:
    """The first `count` events of a watch stream (then the stream is closed)."""
    taken = []
    for event in events:
        taken.append(event)
        if len(taken) == count:
            events.close()
            break
    return taken


def test_create_stamps_metadata(core):
    created = core.create_namespaced_config_map('default', _configmap('a'))
    meta = created.metadata
    assert meta.uid and meta.creation_timestamp and meta.namespace == 'default'
    assert int(meta.resource_version) > 0


def test_generate_name_is_honoured(core):
    body = _configmap('ignored')
    body['metadata'] = {'generateName': 'cm-'}
    created = core.create_namespaced_config_map('default', body)
    assert created.metadata.name.startswith('cm-') and len(created.metadata.name) == len('cm-') + 5


def test_resource_version_is_cluster_wide_and_bumped_on_every_write(core):
    first = core.create_namespaced_config_map('default', _configmap('a'))
    second = core.create_namespaced_config_map('default', _configmap('b'))
    patched = core.patch_namespaced_config_map('a', 'default', {'data': {'k': 'w'}})
    versions = [int(o.metadata.resource_version) for o in (first, second, patched)]
    assert versions == sorted(versions) and len(set(versions)) == 3


def test_generation_moves_on_spec_changes_only(apps):
    created = apps.create_namespaced_deployment('default', _deployment('web'))
    labelled = apps.patch_namespaced_deployment('web', 'default', {'metadata': {'labels': {'x': 'y'}}})
    status_written = apps.patch_namespaced_deployment_status('web', 'default', {'status': {'replicas': 7}})
    rescaled = apps.patch_namespaced_deployment('web', 'default', {'spec': {'replicas': 3}})
    generations = [o.metadata.generation for o in (created, labelled, status_written, rescaled)]
    assert generations == [1, 1, 1, 2]


def test_create_of_existing_is_409_already_exists(core):
    core.create_namespaced_config_map('default', _configmap('a'))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map('default', _configmap('a'))
    status = json.loads(err.value.body)
    assert (err.value.status, status['kind'], status['reason'], status['code']) == (409, 'Status', 'AlreadyExists', 409)


def test_missing_object_is_404_not_found_status(core):
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map('nope', 'default')
    status = json.loads(err.value.body)
    assert (err.value.status, status['kind'], status['reason'], status['code']) == (404, 'Status', 'NotFound', 404)
    assert status['message'] == 'configmaps "nope" not found'


def test_stale_resource_version_on_replace_is_409_conflict(core):
    created = core.create_namespaced_config_map('default', _configmap('a'))
    core.patch_namespaced_config_map('a', 'default', {'data': {'k': 'newer'}})
    created.data = {'k': 'stale'}
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map('a', 'default', created)
    assert (err.value.status, json.loads(err.value.body)['reason']) == (409, 'Conflict')


def test_replace_with_current_resource_version_succeeds(core):
    created = core.create_namespaced_config_map('default', _configmap('a'))
    created.data = {'k': 'replaced'}
    replaced = core.replace_namespaced_config_map('a', 'default', created)
    assert replaced.data == {'k': 'replaced'}


def test_stale_resource_version_on_merge_patch_is_409(core):
    created = core.create_namespaced_config_map('default', _configmap('a'))
    core.patch_namespaced_config_map('a', 'default', {'data': {'k': 'newer'}})
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map('a', 'default',
                                         {'metadata': {'resourceVersion': created.metadata.resource_version}})
    assert err.value.status == 409


def test_failed_json_patch_test_is_422(kube_api, core):
    created = core.create_namespaced_config_map('default', _configmap('a'))
    status, body = kube_api.request('PATCH', '/api/v1/namespaces/default/configmaps/a', [
        {'op': 'test', 'path': '/metadata/resourceVersion', 'value': 'not-' + created.metadata.resource_version},
        {'op': 'add', 'path': '/metadata/finalizers', 'value': ['x']},
    ], content_type='application/json-patch+json')
    assert (status, body['kind'], body['reason'], body['code']) == (422, 'Status', 'Invalid', 422)


def test_json_patch_applies_when_test_passes(kube_api, core):
    created = core.create_namespaced_config_map('default', _configmap('a'))
    status, body = kube_api.request('PATCH', '/api/v1/namespaces/default/configmaps/a', [
        {'op': 'test', 'path': '/metadata/resourceVersion', 'value': created.metadata.resource_version},
        {'op': 'add', 'path': '/metadata/finalizers', 'value': ['x']},
    ], content_type='application/json-patch+json')
    assert status == 200 and body['metadata']['finalizers'] == ['x']


def test_strategic_merge_patch_merges_containers_and_env_by_name(apps):
    apps.create_namespaced_deployment('default', _deployment('web'))
    patched = apps.patch_namespaced_deployment('web', 'default', {'spec': {'template': {'spec': {'containers': [
        {'name': 'main', 'env': [{'name': 'B', 'value': '2'}]},
        {'name': 'sidecar', 'image': 'y:1'},
    ]}}}})  # the client sends dicts as strategic merge patches
    containers = patched.spec.template.spec.containers
    assert [c.name for c in containers] == ['main', 'sidecar']
    assert containers[0].image == 'x:1' and [e.name for e in containers[0].env] == ['A', 'B']


def test_status_write_changes_only_status(apps):
    apps.create_namespaced_deployment('default', _deployment('web', replicas=2))
    written = apps.patch_namespaced_deployment_status('web', 'default', {
        'spec': {'replicas': 9}, 'status': {'replicas': 5}})
    assert written.spec.replicas == 2 and written.status.replicas == 5


def test_main_resource_write_ignores_status(kube_api, apps):
    apps.create_namespaced_deployment('default', _deployment('web', replicas=2))
    status, body = kube_api.request('PATCH', '/apis/apps/v1/namespaces/default/deployments/web',
                                    {'spec': {'replicas': 4}, 'status': {'replicas': 99}},
                                    content_type='application/merge-patch+json')
    assert status == 200 and body['spec']['replicas'] == 4 and body['status'].get('replicas') != 99


def test_deployment_scale_subresource_speaks_autoscaling_v1(apps):
    apps.create_namespaced_deployment('default', _deployment('web', replicas=2, labels={'app': 'web', 'tier': 'a'}))
    scale = apps.read_namespaced_deployment_scale('web', 'default')
    assert (scale.kind, scale.api_version, scale.spec.replicas) == ('Scale', 'autoscaling/v1', 2)
    assert scale.status.selector == 'app=web,tier=a'
    apps.patch_namespaced_deployment_scale('web', 'default', {'spec': {'replicas': 5}})
    assert apps.read_namespaced_deployment('web', 'default').spec.replicas == 5


def test_list_has_kind_api_version_and_resource_version(kube_api, core):
    core.create_namespaced_config_map('default', _configmap('a'))
    status, body = kube_api.request('GET', '/api/v1/namespaces/default/configmaps')
    assert (status, body['kind'], body['apiVersion']) == (200, 'ConfigMapList', 'v1')
    assert int(body['metadata']['resourceVersion']) >= int(body['items'][0]['metadata']['resourceVersion'])


@pytest.mark.parametrize('selector, expected', [
    ('tier=web', ['a', 'b']),
    ('tier==web', ['a', 'b']),
    ('tier!=web', ['c', 'd']),
    ('tier in (web,db)', ['a', 'b', 'c']),
    ('tier notin (web)', ['c', 'd']),
    ('canary', ['b']),
    ('!canary', ['a', 'c', 'd']),
    ('tier=web,!canary', ['a']),
], ids=['eq', 'eqeq', 'neq', 'in', 'notin', 'exists', 'not-exists', 'and'])
def test_list_label_selectors(core, selector, expected):
    for name, labels in [('a', {'tier': 'web'}), ('b', {'tier': 'web', 'canary': '1'}), ('c', {'tier': 'db'}),
                         ('d', {})]:
        core.create_namespaced_config_map('default', _configmap(name, labels))
    found = core.list_namespaced_config_map('default', label_selector=selector)
    assert [o.metadata.name for o in found.items] == expected


def test_list_field_selectors(kube_api, core):
    kube_api.add_pod('default', 'up', {}, '127.0.0.2', 8000)
    kube_api.add_pod('default', 'pending', {}, '127.0.0.3', 8000, phase='Pending', ready=False)
    running = core.list_namespaced_pod('default', field_selector='status.phase=Running')
    named = core.list_pod_for_all_namespaces(field_selector='metadata.name=pending,metadata.namespace=default')
    assert [p.metadata.name for p in running.items] == ['up']
    assert [p.metadata.name for p in named.items] == ['pending']


def test_namespaces_can_be_created_and_scope_objects(core):
    core.create_namespace({'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': 'team'}})
    core.create_namespaced_config_map('team', _configmap('a', namespace='team'))
    core.create_namespaced_config_map('default', _configmap('b'))
    assert 'team' in [n.metadata.name for n in core.list_namespace().items]
    assert [o.metadata.name for o in core.list_namespaced_config_map('team').items] == ['a']


def test_watch_from_resource_version_sends_only_newer_events(core):
    core.create_namespaced_config_map('default', _configmap('old'))
    since = core.list_namespaced_config_map('default').metadata.resource_version
    core.create_namespaced_config_map('default', _configmap('new'))
    core.patch_namespaced_config_map('new', 'default', {'data': {'k': 'changed'}})
    core.delete_namespaced_config_map('new', 'default')
    events = kubernetes.watch.Watch().stream(core.list_namespaced_config_map, 'default',
                                             resource_version=since, timeout_seconds=_WATCH_BOUND_S)
    assert [(e['type'], e['object'].metadata.name) for e in _first(events, 3)] == [
        ('ADDED', 'new'), ('MODIFIED', 'new'), ('DELETED', 'new')]


def test_namespaced_watch_sees_only_its_namespace_live(core):
    core.create_namespace({'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': 'other'}})
    seen = []

    since = core.list_namespaced_config_map('default').metadata.resource_version

    def watch():
        # 'elsewhere' is written first: had it leaked into this watch, it would come first.
        events = kubernetes.watch.Watch().stream(core.list_namespaced_config_map, 'default',
                                                 resource_version=since, timeout_seconds=_WATCH_BOUND_S)
        seen.extend((event['type'], event['object'].metadata.name) for event in _first(events, 1))
    thread = threading.Thread(target=watch)
    thread.start()
    core.create_namespaced_config_map('other', _configmap('elsewhere', namespace='other'))
    core.create_namespaced_config_map('default', {'metadata': {'name': 'here'}, 'data': {}})  # no namespace in body
    thread.join(_WATCH_BOUND_S)
    assert seen == [('ADDED', 'here')]


def test_watch_with_selector_turns_mismatching_changes_into_deleted(kube_api, core):
    core.create_namespaced_config_map('default', _configmap('a', {'on': 'yes'}))
    since = core.list_namespaced_config_map('default').metadata.resource_version
    core.patch_namespaced_config_map('a', 'default', {'metadata': {'labels': {'on': 'no'}}})
    core.patch_namespaced_config_map('a', 'default', {'metadata': {'labels': {'on': 'yes'}}})
    events = kubernetes.watch.Watch().stream(core.list_namespaced_config_map, 'default', label_selector='on=yes',
                                             resource_version=since, timeout_seconds=_WATCH_BOUND_S)
    assert [e['type'] for e in _first(events, 2)] == ['DELETED', 'ADDED']


def test_server_dry_run_writes_nothing(kube_api, core):
    core.create_namespaced_config_map('default', _configmap('a'), dry_run='All')
    core.create_namespaced_config_map('default', _configmap('b'))
    patched = core.patch_namespaced_config_map('b', 'default', {'data': {'k': 'dry'}}, dry_run='All')
    core.delete_namespaced_config_map('b', 'default', dry_run='All')
    names = [o.metadata.name for o in core.list_namespaced_config_map('default').items]
    assert patched.data == {'k': 'dry'} and names == ['b']
    assert core.read_namespaced_config_map('b', 'default').data == {'k': 'v'}


def test_crd_serves_every_version_from_one_storage_and_prefers_the_newest(kube_api):
    version = {'served': True, 'schema': {'openAPIV3Schema': {'type': 'object'}}}
    kube_api.create({'apiVersion': 'apiextensions.k8s.io/v1', 'kind': 'CustomResourceDefinition',
                     'metadata': {'name': 'gadgets.example.dev'},
                     'spec': {'group': 'example.dev', 'scope': 'Cluster',
                              'names': {'kind': 'Gadget', 'plural': 'gadgets'},
                              'versions': [dict(version, name='v1', storage=True), dict(version, name='v2')]}})
    kube_api.create({'apiVersion': 'example.dev/v1', 'kind': 'Gadget', 'metadata': {'name': 'g'}})
    _, through_v2 = kube_api.request('GET', '/apis/example.dev/v2/gadgets/g')
    _, group = kube_api.request('GET', '/apis/example.dev')
    assert through_v2['apiVersion'] == 'example.dev/v2' and 'namespace' not in through_v2['metadata']
    assert group['preferredVersion']['version'] == 'v2'


def test_send_initial_events_ends_with_a_bookmark(kube_api, core):
    core.create_namespaced_config_map('default', _configmap('a'))
    query = 'watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan'
    with urllib.request.urlopen(f'{kube_api.url}/api/v1/namespaces/default/configmaps?{query}&timeoutSeconds=5',
                                timeout=_WATCH_BOUND_S) as stream:
        content_type = stream.headers['Content-Type']
        added, bookmark = json.loads(stream.readline()), json.loads(stream.readline())
    assert content_type == 'application/json'
    assert (added['type'], added['object']['metadata']['name']) == ('ADDED', 'a')
    assert bookmark['type'] == 'BOOKMARK'
    assert bookmark['object']['metadata']['annotations'] == {'k8s.io/initial-events-end': 'true'}
