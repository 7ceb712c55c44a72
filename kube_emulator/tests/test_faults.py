"""Fault injection: injected error answers (counted, filtered by method and path, spent after
`times`), dropped watch streams, and the request log."""
import http.client
import json
import threading
import time
import urllib.request

import kubernetes
import pytest
from kubernetes.client import ApiException

from kube_emulator.faults import FaultRule

CONFIGMAPS = '/api/v1/namespaces/default/configmaps'


def _configmap(name: str) -> dict:
    return {'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': name}, 'data': {'k': 'v'}}


RULES = {
    'any-method-matches': (FaultRule(None, r'/configmaps', 503, 1), 'GET', CONFIGMAPS, True),
    'method-filters': (FaultRule('PATCH', r'/configmaps', 409, 1), 'GET', CONFIGMAPS, False),
    'method-is-case-blind': (FaultRule('patch', r'/configmaps', 409, 1), 'PATCH', CONFIGMAPS + '/a', True),
    'path-is-searched': (FaultRule(None, r'/status$', 500, 1), 'PATCH', CONFIGMAPS + '/a', False),
    'query-is-part-of-the-path': (FaultRule('GET', r'watch=true', 500, 1), 'GET', CONFIGMAPS + '?watch=true', True),
}


def test_a_body_pattern_tells_apart_clients_that_send_to_the_same_path(kube_api):
    kube_api.create(_configmap('d'))
    rule = kube_api.inject('PATCH', r'/configmaps/d$', status=500, times=None, body_regex=r'"k": "mine"')
    merge = 'application/merge-patch+json'
    assert kube_api.request('PATCH', f'{CONFIGMAPS}/d', {'data': {'k': 'mine'}}, merge)[0] == 500
    code, body = kube_api.request('PATCH', f'{CONFIGMAPS}/d', {'data': {'k': 'theirs'}}, merge)
    assert code == 200 and body['data'] == {'k': 'theirs'}  # the body was still read by the server
    assert rule.hits == 1


@pytest.mark.parametrize('rule, method, path, matches', RULES.values(), ids=RULES.keys())
def test_rule_matching(rule, method, path, matches):
    assert rule.matches(method, path) is matches


def test_an_injected_fault_answers_a_status_then_is_spent(kube_api):
    kube_api.create(_configmap('a'))
    rule = kube_api.inject('GET', r'/configmaps/a$', status=503, times=2)
    answers = [kube_api.request('GET', f'{CONFIGMAPS}/a') for _ in range(3)]
    assert [code for code, _ in answers] == [503, 503, 200]
    assert answers[0][1]['kind'] == 'Status' and answers[0][1]['reason'] == 'ServiceUnavailable'
    assert answers[0][1]['code'] == 503 and 'injected fault' in answers[0][1]['message']
    assert rule.hits == 2


def test_a_fault_touches_only_its_method_and_path(kube_api):
    kube_api.inject('POST', r'/configmaps$', status=500, times=None)
    assert kube_api.request('GET', CONFIGMAPS)[0] == 200
    assert kube_api.request('POST', CONFIGMAPS, _configmap('b'))[0] == 500
    assert kube_api.request('POST', CONFIGMAPS, _configmap('b'))[0] == 500  # times=None: until cleared
    kube_api.clear_faults()
    assert kube_api.request('POST', CONFIGMAPS, _configmap('b'))[0] == 201


def test_a_fault_skips_the_write(kube_api):
    kube_api.create(_configmap('c'))
    kube_api.inject('PATCH', r'/configmaps/c$', status=409)
    core = kubernetes.client.CoreV1Api(kube_api.client())
    with pytest.raises(ApiException) as conflict:
        core.patch_namespaced_config_map('c', 'default', {'data': {'k': 'changed'}})
    assert conflict.value.status == 409 and json.loads(conflict.value.body)['reason'] == 'Conflict'
    assert core.read_namespaced_config_map('c', 'default').data == {'k': 'v'}


def test_only_error_statuses_can_be_injected(kube_api):
    with pytest.raises(ValueError, match='error status'):
        kube_api.inject(status=200)


def _open_watch(kube_api) -> http.client.HTTPResponse:
    return urllib.request.urlopen(f'{kube_api.url}{CONFIGMAPS}?watch=true&timeoutSeconds=10', timeout=10)


def test_dropped_watches_break_mid_stream_and_new_ones_are_served(kube_api):
    kube_api.create(_configmap('d'))
    stream = _open_watch(kube_api)
    assert json.loads(stream.readline())['type'] == 'ADDED'
    kube_api.drop_watches()
    # No end of the chunked body: a broken stream (timeoutSeconds would have ended it cleanly).
    with pytest.raises(http.client.IncompleteRead):
        stream.read()
    stream.close()
    again = _open_watch(kube_api)
    threading.Timer(0.2, lambda: kube_api.create(_configmap('e'))).start()
    seen = [json.loads(again.readline())['object']['metadata']['name'] for _ in range(2)]
    again.close()
    assert seen == ['d', 'e']


def test_the_request_log_counts_requests_since_a_moment(kube_api):
    kube_api.request('GET', CONFIGMAPS)
    since = time.monotonic()
    kube_api.request('GET', CONFIGMAPS)
    kube_api.request('POST', CONFIGMAPS, _configmap('f'))
    assert [(r.method, r.path) for r in kube_api.requests(since)] == \
        [('GET', CONFIGMAPS), ('POST', CONFIGMAPS)]
    assert len(kube_api.requests(since, method='POST', path_regex='configmaps')) == 1
