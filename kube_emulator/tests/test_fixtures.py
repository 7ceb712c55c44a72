"""The fixture's own contract: clean stop (threads, watches, aiohttp's resolver), several emulators at once."""
import threading
import urllib.request

import aiohttp.connector

from kube_emulator.fixtures import run_kube_api


def _emulator_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == 'kube-emulator']


def test_two_emulators_at_once_are_independent_and_stop_cleanly(tmp_path):
    resolver = aiohttp.connector.TCPConnector._resolve_host
    with run_kube_api(tmp_path / 'a') as first, run_kube_api(tmp_path / 'b') as second:
        first.create({'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'only-in-first'}})
        assert first.url != second.url and len(_emulator_threads()) == 2
        assert second.request('GET', '/api/v1/namespaces/default/configmaps/only-in-first')[0] == 404
    assert _emulator_threads() == [] and aiohttp.connector.TCPConnector._resolve_host is resolver


def test_stop_ends_an_open_watch(tmp_path):
    lines: list[bytes] = []
    with run_kube_api(tmp_path) as api:
        response = urllib.request.urlopen(api.url + '/api/v1/namespaces/default/configmaps?watch=true', timeout=10)
        reader = threading.Thread(target=lambda: lines.extend(response))
        reader.start()
        api.create({'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'a'}})
    reader.join(5)  # the stream ended with the emulator, not with this bound
    response.close()
    assert not reader.is_alive() and any(b'"ADDED"' in line for line in lines)


def test_kubeconfig_and_env_point_at_the_emulator(kube_api):
    assert kube_api.env['KUBECONFIG'] == str(kube_api.kubeconfig)
    assert kube_api.url in kube_api.kubeconfig.read_text()
    assert 'default' in kube_api.kubectl('config', 'view', '--minify', '-o', 'jsonpath={..namespace}').stdout
