"""The emulator through the real kubectl, against a small made-up CRD registered in each test."""
import json

import pytest
import yaml

from kube_emulator.tests.samples import WIDGET_CRD, widget_yaml


@pytest.fixture()
def widgets(kube_api):
    kube_api.kubectl('apply', '--validate=false', '-f', '-', input=yaml.safe_dump(WIDGET_CRD))
    kube_api.kubectl('wait', '--for=condition=Established', '--timeout=10s', 'crd/widgets.example.dev')
    return kube_api


def test_created_crd_is_established_and_accepted(widgets):
    crd = json.loads(widgets.kubectl('get', 'crd', 'widgets.example.dev', '-o', 'json').stdout)
    conditions = {c['type']: c['status'] for c in crd['status']['conditions']}
    assert conditions == {'Established': 'True', 'NamesAccepted': 'True'}


def test_apply_get_by_short_name_and_label(widgets):
    widgets.kubectl('apply', '--validate=false', '-f', '-', input=widget_yaml('a', labels={'team': 'red'}))
    widgets.kubectl('apply', '--validate=false', '-f', '-', input=widget_yaml('b', labels={'team': 'blue'}))
    found = json.loads(widgets.kubectl('get', 'wg', '-l', 'team=red', '-o', 'json').stdout)
    assert [item['metadata']['name'] for item in found['items']] == ['a']


def test_reapply_changes_spec_and_generation(widgets):
    widgets.kubectl('apply', '--validate=false', '-f', '-', input=widget_yaml('a', size=1))
    widgets.kubectl('apply', '--validate=false', '-f', '-', input=widget_yaml('a', size=4))
    widget = json.loads(widgets.kubectl('get', 'widget/a', '-o', 'json').stdout)
    assert (widget['spec']['size'], widget['metadata']['generation']) == (4, 2)


def test_server_side_apply_creates_then_updates(widgets):
    widgets.kubectl('apply', '--server-side', '--validate=false', '-f', '-', input=widget_yaml('a', size=2))
    widgets.kubectl('apply', '--server-side', '--validate=false', '-f', '-', input=widget_yaml('a', size=3))
    widget = json.loads(widgets.kubectl('get', 'widgets.example.dev', 'a', '-o', 'json').stdout)
    assert widget['spec']['size'] == 3


def test_printer_columns_show_in_get(widgets):
    widgets.kubectl('apply', '--validate=false', '-f', '-', input=widget_yaml('a', size=3))
    widgets.request('PATCH', '/apis/example.dev/v1/namespaces/default/widgets/a/status',
                    {'status': {'conditions': [{'type': 'Ready', 'status': 'True'}]}},
                    content_type='application/merge-patch+json')
    header, row = widgets.kubectl('get', 'widgets').stdout.splitlines()
    assert header.split() == ['NAME', 'SIZE', 'READY'] and row.split() == ['a', '3', 'True']


def test_scale_goes_through_the_crd_scale_paths(widgets):
    widgets.kubectl('apply', '--validate=false', '-f', '-', input=widget_yaml('a', size=1))
    widgets.kubectl('scale', 'wg/a', '--replicas=5')
    widget = json.loads(widgets.kubectl('get', 'wg/a', '-o', 'json').stdout)
    status, scale = widgets.request('GET', '/apis/example.dev/v1/namespaces/default/widgets/a/scale')
    assert widget['spec']['size'] == 5
    assert (status, scale['kind'], scale['spec']['replicas']) == (200, 'Scale', 5)


def test_wait_for_a_condition_written_later(widgets):
    widgets.kubectl('apply', '--validate=false', '-f', '-', input=widget_yaml('a'))
    widgets.request('PATCH', '/apis/example.dev/v1/namespaces/default/widgets/a/status',
                    {'status': {'conditions': [{'type': 'Ready', 'status': 'True'}]}},
                    content_type='application/merge-patch+json')
    result = widgets.kubectl('wait', '--for=condition=Ready', '--timeout=10s', 'wg/a')
    assert 'condition met' in result.stdout


def test_describe_and_delete(widgets):
    widgets.kubectl('apply', '--validate=false', '-f', '-', input=widget_yaml('a'))
    assert 'Name:' in widgets.kubectl('describe', 'wg/a').stdout
    widgets.kubectl('delete', 'wg/a', '--wait=true', '--timeout=10s')
    assert widgets.kubectl('get', 'wg', '-o', 'json').stdout.count('"name"') == 0


def test_deleting_the_crd_unregisters_the_resource(widgets):
    widgets.kubectl('apply', '--validate=false', '-f', '-', input=widget_yaml('a'))
    widgets.kubectl('delete', 'crd', 'widgets.example.dev')
    status, _ = widgets.request('GET', '/apis/example.dev/v1/namespaces/default/widgets')
    assert status == 404


def test_create_namespace_from_file_and_get_it(kube_api):
    kube_api.kubectl('create', '--validate=false', '-f', '-', input=yaml.safe_dump(
        {'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': 'team'}}))
    assert 'namespace/team' in kube_api.kubectl('get', 'ns', '-o', 'name').stdout.split()


def test_get_pods_shows_phase_and_ip(kube_api):
    kube_api.add_pod('default', 'p0', {'app': 'x'}, '127.0.0.7', 8000)
    header, row = kube_api.kubectl('get', 'pods').stdout.splitlines()
    assert header.split()[:3] == ['NAME', 'STATUS', 'IP'] and row.split()[:3] == ['p0', 'Running', '127.0.0.7']
