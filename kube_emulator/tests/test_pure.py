"""Tables for the emulator's pure helpers: patches, selectors, paths, JSONPath, versions, controllers."""
import datetime

import pytest

from kube_emulator import controllers, discovery, objects, patching, routing, selectors

NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize('target, patch, expected', [
    ({'a': 1, 'b': 2}, {'b': None}, {'a': 1}),
    ({'a': {'x': 1}}, {'a': {'y': 2}}, {'a': {'x': 1, 'y': 2}}),
    ({'l': [1, 2]}, {'l': [3]}, {'l': [3]}),
], ids=['null-deletes', 'dicts-merge', 'lists-replace'])
def test_merge_patch(target, patch, expected):
    assert patching.merge_patch(target, patch) == expected


@pytest.mark.parametrize('target, patch, expected', [
    ({'c': [{'name': 'a', 'image': '1'}]}, {'c': [{'name': 'a', 'image': '2'}, {'name': 'b'}]},
     {'c': [{'name': 'a', 'image': '2'}, {'name': 'b'}]}),
    ({'c': [{'name': 'a', 'env': [{'name': 'X', 'value': '1'}]}]}, {'c': [{'name': 'a', 'env': [{'name': 'Y'}]}]},
     {'c': [{'name': 'a', 'env': [{'name': 'X', 'value': '1'}, {'name': 'Y'}]}]}),
    ({'c': [{'name': 'a'}, {'name': 'b'}]}, {'c': [{'name': 'a', '$patch': 'delete'}]}, {'c': [{'name': 'b'}]}),
    ({'args': ['x']}, {'args': ['y']}, {'args': ['y']}),
], ids=['named-items-merge', 'nested-named-lists', 'patch-delete', 'scalar-lists-replace'])
def test_strategic_merge_patch(target, patch, expected):
    assert patching.strategic_merge_patch(target, patch) == expected


@pytest.mark.parametrize('ops, expected', [
    ([{'op': 'add', 'path': '/m/f', 'value': ['x']}], {'m': {'rv': '3', 'f': ['x']}, 'l': [1, 2]}),
    ([{'op': 'add', 'path': '/l/-', 'value': 3}], {'m': {'rv': '3'}, 'l': [1, 2, 3]}),
    ([{'op': 'remove', 'path': '/l/0'}], {'m': {'rv': '3'}, 'l': [2]}),
    ([{'op': 'replace', 'path': '/m/rv', 'value': '4'}], {'m': {'rv': '4'}, 'l': [1, 2]}),
    ([{'op': 'test', 'path': '/m/rv', 'value': '3'}], {'m': {'rv': '3'}, 'l': [1, 2]}),
    ([{'op': 'move', 'from': '/m/rv', 'path': '/rv'}], {'m': {}, 'l': [1, 2], 'rv': '3'}),
], ids=['add', 'append', 'remove', 'replace', 'test-passes', 'move'])
def test_json_patch(ops, expected):
    assert patching.json_patch({'m': {'rv': '3'}, 'l': [1, 2]}, ops) == expected


@pytest.mark.parametrize('ops, error', [
    ([{'op': 'test', 'path': '/m/rv', 'value': '2'}], patching.PatchTestFailed),
    ([{'op': 'replace', 'path': '/nope', 'value': 1}], patching.PatchError),
    ([{'op': 'frobnicate', 'path': '/m'}], patching.PatchError),
], ids=['test-fails', 'replace-missing', 'unknown-op'])
def test_json_patch_errors(ops, error):
    with pytest.raises(error):
        patching.json_patch({'m': {'rv': '3'}}, ops)


@pytest.mark.parametrize('selector, labels, expected', [
    ('a=1', {'a': '1'}, True),
    ('a!=1', {}, True),
    ('a in (1, 2)', {'a': '2'}, True),
    ('a notin (1,2),b', {'a': '3', 'b': ''}, True),
    ('!a', {'a': '1'}, False),
    ('', {'a': '1'}, True),
], ids=['eq', 'neq-missing', 'in-spaced', 'notin-and-exists', 'not-exists', 'empty'])
def test_label_selector(selector, labels, expected):
    assert selectors.parse_label_selector(selector)({'metadata': {'labels': labels}}) is expected


def test_malformed_label_selector_is_an_error():
    with pytest.raises(selectors.SelectorError):
        selectors.parse_label_selector('a in b')


@pytest.mark.parametrize('selector, expected', [
    ('status.phase=Running', True),
    ('metadata.name!=p', False),
    ('spec.nodeName=', True),
], ids=['status-phase', 'name-neq', 'missing-is-empty'])
def test_field_selector(selector, expected):
    pod = {'metadata': {'name': 'p'}, 'status': {'phase': 'Running'}, 'spec': {}}
    assert selectors.parse_field_selector(selector)(pod) is expected


@pytest.mark.parametrize('path, expected', [
    ('/api/v1/namespaces', routing.ApiPath('', 'v1', None, 'namespaces')),
    ('/api/v1/namespaces/x', routing.ApiPath('', 'v1', None, 'namespaces', 'x')),
    ('/api/v1/namespaces/x/status', routing.ApiPath('', 'v1', None, 'namespaces', 'x', 'status')),
    ('/api/v1/namespaces/x/pods', routing.ApiPath('', 'v1', 'x', 'pods')),
    ('/apis/apps/v1/namespaces/x/deployments/d/scale', routing.ApiPath('apps', 'v1', 'x', 'deployments', 'd', 'scale')),
    ('/apis/example.dev', routing.ApiPath('example.dev')),
    ('/version', routing.ApiPath()),
], ids=['namespaces', 'namespace', 'namespace-status', 'namespaced-list', 'scale', 'group', 'not-api'])
def test_parse_path(path, expected):
    assert routing.parse_path(path) == expected


@pytest.mark.parametrize('path, expected', [
    ('.spec.size', 3),
    ('.status.conditions[?(@.type=="Ready")].status', 'True'),
    ('.status.conditions[0].type', 'Synced'),
    ('.status.missing', None),
    (r'.metadata.annotations.example\.com/leader', 'pod-a'),  # an escaped dot is part of the key
], ids=['dotted', 'filter', 'index', 'missing', 'escaped-dot'])
def test_printer_column_json_path(path, expected):
    obj = {'metadata': {'annotations': {'example.com/leader': 'pod-a'}},
           'spec': {'size': 3}, 'status': {'conditions': [{'type': 'Synced', 'status': 'False'},
                                                          {'type': 'Ready', 'status': 'True'}]}}
    assert discovery.eval_json_path(obj, path) == expected


@pytest.mark.parametrize('seconds, expected', [(5, '5s'), (125, '2m'), (7200, '2h'), (3 * 86400, '3d')],
                         ids=['seconds', 'minutes', 'hours', 'days'])
def test_age(seconds, expected):
    then = objects.now_rfc3339(NOW - datetime.timedelta(seconds=seconds))
    assert discovery.age(then, NOW) == expected


def test_preferred_version_is_the_newest_stable():
    ordered = sorted(['v1beta1', 'v2', 'v1', 'v1alpha1', 'v2beta2'], key=discovery.version_priority, reverse=True)
    assert ordered == ['v2', 'v1', 'v2beta2', 'v1beta1', 'v1alpha1']


def test_carry_over_keeps_identity_and_bumps_generation_on_spec_only():
    old = {'metadata': {'name': 'a', 'uid': 'u', 'generation': 3, 'resourceVersion': '9'}, 'spec': {'x': 1}}
    relabelled = objects.carry_over(old, {'metadata': {'name': 'b', 'uid': 'v', 'labels': {'l': '1'}},
                                          'spec': {'x': 1}})
    respecced = objects.carry_over(old, {'metadata': {}, 'spec': {'x': 2}})
    assert relabelled['metadata'] == {'name': 'a', 'uid': 'u', 'generation': 3, 'resourceVersion': '9',
                                      'labels': {'l': '1'}}
    assert respecced['metadata']['generation'] == 4


def test_deployment_status_keeps_condition_times_when_unchanged():
    deployment = {'metadata': {'name': 'd', 'generation': 2}, 'spec': {'replicas': 3}}
    first = controllers.deployment_status(deployment, '2026-01-01T00:00:00Z')
    again = controllers.deployment_status(dict(deployment, status=first), '2026-01-01T00:05:00Z')
    assert again == first and first['readyReplicas'] == 3 and first['observedGeneration'] == 2


@pytest.mark.parametrize('refs, live, expected', [
    ([], set(), False),
    ([{'uid': 'a'}], {'a'}, False),
    ([{'uid': 'a'}], set(), True),
    ([{'uid': 'a'}, {'uid': 'b'}], {'b'}, False),
], ids=['no-owners', 'owner-alive', 'owner-gone', 'one-owner-left'])
def test_is_orphaned(refs, live, expected):
    assert controllers.is_orphaned({'metadata': {'ownerReferences': refs}}, live) is expected


def test_scale_view_of_a_custom_resource():
    obj = {'metadata': {'name': 'w', 'resourceVersion': '5'}, 'spec': {'size': 2},
           'status': {'size': 1, 'selector': 'app=w'}}
    paths = objects.ScalePaths('.spec.size', '.status.size', '.status.selector')
    scale = objects.to_scale(obj, paths)
    assert (scale['spec'], scale['status'], scale['metadata']['resourceVersion']) == (
        {'replicas': 2}, {'replicas': 1, 'selector': 'app=w'}, '5')
    assert objects.from_scale(obj, {'spec': {'replicas': 4}}, paths)['spec']['size'] == 4


@pytest.mark.parametrize('has_status, expected', [(True, 3), (False, 4)], ids=['status-subresource', 'no-subresource'])
def test_status_changes_bump_generation_only_without_a_status_subresource(has_status, expected):
    old = {'metadata': {'name': 'a', 'generation': 3, 'resourceVersion': '9'}, 'spec': {}, 'status': {'x': 1}}
    updated = objects.carry_over(old, dict(old, status={'x': 2}), has_status=has_status)
    assert updated['metadata']['generation'] == expected
