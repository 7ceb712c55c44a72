"""A real kopf operator (fresh registry, in this test's event loop) against the emulator."""
import asyncio

import kopf
import yaml

from kube_emulator.tests.samples import WIDGET_CRD

_BOUND_S = 5.0


async def _until(predicate) -> bool:
    for _ in range(int(_BOUND_S / 0.02)):
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return predicate()


def _registry(url: str, calls: list[tuple[str, str]]) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**_):
        return kopf.ConnectionInfo(server=url, token='any')

    @kopf.on.create('example.dev', 'v1', 'widgets', registry=registry)
    def create(name, patch, **_):
        calls.append(('create', name))
        patch.status['seen'] = True

    @kopf.on.update('example.dev', 'v1', 'widgets', registry=registry)
    def update(name, **_):
        calls.append(('update', name))

    @kopf.on.delete('example.dev', 'v1', 'widgets', registry=registry)
    def delete(name, **_):
        calls.append(('delete', name))

    return registry


async def test_kopf_runs_create_update_and_delete_handlers(kube_api):
    kube_api.kubectl('apply', '--validate=false', '-f', '-', input=yaml.safe_dump(WIDGET_CRD))
    calls: list[tuple[str, str]] = []
    settings = kopf.OperatorSettings()
    settings.peering.standalone = True
    stop = asyncio.Event()
    operator = asyncio.create_task(kopf.operator(registry=_registry(kube_api.url, calls), settings=settings,
                                                 standalone=True, namespaces=['default'], stop_flag=stop))
    widget = {'apiVersion': 'example.dev/v1', 'kind': 'Widget', 'metadata': {'name': 'w'}, 'spec': {'size': 1}}
    try:
        await asyncio.to_thread(kube_api.create, widget)
        assert await _until(lambda: ('create', 'w') in calls)
        await asyncio.to_thread(kube_api.kubectl, 'patch', 'widget', 'w', '--type=merge', '-p', '{"spec":{"size":2}}')
        assert await _until(lambda: ('update', 'w') in calls)
        _, stored = await asyncio.to_thread(kube_api.request, 'GET',
                                            '/apis/example.dev/v1/namespaces/default/widgets/w')
        await asyncio.to_thread(kube_api.kubectl, 'delete', 'widget', 'w', '--timeout=10s')
        assert await _until(lambda: ('delete', 'w') in calls)
    finally:
        stop.set()
        await asyncio.wait_for(operator, _BOUND_S)
    assert stored['status']['seen'] is True and stored['metadata']['finalizers']
    status, _ = await asyncio.to_thread(kube_api.request, 'GET', '/apis/example.dev/v1/namespaces/default/widgets/w')
    assert status == 404
