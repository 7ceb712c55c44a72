"""KubeEmulator: kmock's Kubernetes scaffold plus the API-server behaviour a kopf operator, kubectl and
Helm rely on. It reaches kmock only through kmock_seam.ScaffoldBase (request entry, discovery hooks).

Owns the HTTP side: routing resource paths, PUT/PATCH/DELETE into Cluster writes (status and scale
split, patch types, preconditions), lists, watches, Tables, Status errors. The Cluster (cluster.py)
owns the objects and the fake controllers. kmock keeps: the server (kmock.Server), the resource
catalogue (`.resources`, load_bundled), /version, /api and the 404 fallback.
"""
import datetime
from collections.abc import Callable
from typing import Any

import aiohttp.web
import attrs

from kube_emulator import discovery, objects, patching, watch
from kube_emulator.cluster import NAMESPACES, Cluster, no_resource, qualified
from kube_emulator.faults import Faults
from kube_emulator.kmock_seam import Request, ResourceInfo, ScaffoldBase, resource
from kube_emulator.objects import ApiError
from kube_emulator.selectors import SelectorError, parse_field_selector, parse_label_selector
from kube_emulator.store import GroupPlural, Store

_PATCHES: dict[str, Callable[[Any, Any], Any]] = {
    'application/merge-patch+json': patching.merge_patch,
    'application/strategic-merge-patch+json': patching.strategic_merge_patch,
    'application/apply-patch+yaml': patching.strategic_merge_patch,  # server-side apply, minus field ownership
    'application/json-patch+json': patching.json_patch,
}
_APPLY = 'application/apply-patch+yaml'


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@attrs.define(kw_only=True)
class KubeEmulator(ScaffoldBase):
    """An in-memory API server; serve it with `kmock.Server(emulator, host='127.0.0.1')`."""

    clock: Callable[[], datetime.datetime] = utc_now
    cluster: Cluster = attrs.field(init=False)
    faults: Faults = attrs.field(init=False, factory=Faults)  # injected errors, dropped watches, log

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.resources.load_bundled()
        self.cluster = Cluster(self.resources, self.clock)
        for name in ('default', 'kube-system', 'kube-public'):
            self.cluster.create(NAMESPACES, None, {'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': name}})

    @property
    def store(self) -> Store:
        return self.cluster.store

    def close(self) -> None:
        """End all watches and stop the fake controllers (call before stopping the server)."""
        self.cluster.close()

    # --- HTTP entry (kmock_seam calls it for every request) ---

    async def serve(self, request: Request, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        body = (await raw.read()).decode(errors='replace')  # aiohttp keeps it for the handlers
        fault = self.faults.take(raw.method, raw.path_qs, raw.headers.get('User-Agent', ''), body)
        if fault is not None:
            injected = ApiError(fault.status, fault.reason, f'injected fault on {raw.method} {raw.path}')
            return aiohttp.web.json_response(injected.status(), status=fault.status)
        try:
            if request.resource is not None and request.resource.plural is not None:
                return await self._serve(request, raw)
            return await self.serve_by_kmock(request)  # discovery, /version, 404
        except ApiError as e:
            return aiohttp.web.json_response(e.status(), status=e.code)

    # --- discovery (kmock's says groupVersion "/v1" and picks a random preferred version) ---

    def _served(self) -> discovery.Served:
        return [(res, self.resources[res]) for res in self.resources]

    def discovery_groups(self) -> Any:
        return discovery.group_list(self._served())

    def discovery_group(self, group: str) -> Any:
        found = discovery.group(self._served(), group)
        if found is None:
            raise no_resource()
        return found

    def discovery_version(self, group: str, version: str) -> Any:
        found = discovery.resource_list(self._served(), group, version)
        if found is None:
            raise no_resource()
        return found

    # --- routing ---

    def _lookup(self, request: Request) -> tuple[resource, ResourceInfo]:
        for res in self.resources:
            if res == request.resource:
                return res, self.resources[res]
        raise no_resource()

    async def _serve(self, request: Request, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        res, info = self._lookup(request)
        key: GroupPlural = (res.group, res.plural)
        if request.namespace is not None and not info.namespaced:
            raise no_resource()
        ns = request.namespace if info.namespaced else None
        sub, name, method = request.subresource, request.name, request.method.value
        dry_run = 'dryRun' in request.params
        if sub is not None and (sub not in ('status', 'scale') or sub not in info.subresources):
            raise no_resource()
        if method == 'GET' and request.params.get('watch') in ('true', '1'):
            return await self._watch(request, raw, res, info, ns)
        if name is None:
            return _json(*self._serve_collection(request, res, info, ns))
        old = self.store.get(key, ns, name)
        if old is None and method == 'PATCH' and _content_type(request) == _APPLY:
            body = dict(request.data or {}, metadata=dict((request.data or {}).get('metadata') or {}, name=name))
            return _json(self._present(request, res, info, self.cluster.create(key, ns, body, dry_run)), 201)
        if old is None:
            raise objects.not_found(qualified(key), name)
        if method == 'GET':
            return _json(self._view(request, res, info, old))
        if method == 'DELETE':
            deleted = old if dry_run else self._delete(request, key, old)
            return _json(self._present(request, res, info, deleted))
        if method in ('PUT', 'PATCH'):
            return _json(self._view(request, res, info, self._write(request, res, info, old, dry_run)))
        raise ApiError(405, 'MethodNotAllowed', f'{method} is not supported')

    def _serve_collection(self, request: Request, res: resource, info: ResourceInfo,
                          ns: str | None) -> tuple[dict[str, Any], int]:
        method, key = request.method.value, (res.group, res.plural)
        if method == 'GET':
            return self._list(request, res, info, ns), 200
        if method == 'POST' and info.namespaced and ns is None:
            raise ApiError(405, 'MethodNotAllowed', f'{res.plural} are created in a namespace: POST to its path')
        if method == 'POST':
            created = self.cluster.create(key, ns, request.data, dry_run='dryRun' in request.params)
            return self._present(request, res, info, created), 201
        if method == 'DELETE':
            matches = self._matcher(request)
            deleted = [self.cluster.delete(key, obj) for obj in self.store.objects(key, ns) if matches(obj)]
            return self._as_list(res, info, deleted), 200
        raise ApiError(405, 'MethodNotAllowed', f'{method} is not supported on a collection')

    # --- reads ---

    def _present(self, request: Request | None, res: resource, info: ResourceInfo,
                 obj: dict[str, Any]) -> dict[str, Any]:
        """obj as this version of the resource, or as a one-row Table if the request asks for Tables."""
        obj = dict(obj, apiVersion=_api_version(res), kind=info.kind)
        if request is not None and _wants_table(request):
            return discovery.table([obj], self.cluster.columns(res), obj['metadata']['resourceVersion'], self.clock())
        return obj

    def _view(self, request: Request, res: resource, info: ResourceInfo,
              obj: dict[str, Any]) -> dict[str, Any]:
        if request.subresource == 'scale':
            return objects.to_scale(obj, self.cluster.scale_paths(res))
        return self._present(request, res, info, obj)

    def _as_list(self, res: resource, info: ResourceInfo, items: list[dict[str, Any]]) -> dict[str, Any]:
        return {'kind': f'{info.kind}List', 'apiVersion': _api_version(res),
                'metadata': {'resourceVersion': str(self.store.resource_version)},
                'items': [self._present(None, res, info, obj) for obj in items]}

    def _matcher(self, request: Request) -> Callable[[dict[str, Any]], bool]:
        try:
            labels = parse_label_selector(request.params.get('labelSelector'))
            fields = parse_field_selector(request.params.get('fieldSelector'))
        except SelectorError as e:
            raise ApiError(400, 'BadRequest', str(e)) from e
        name = request.name  # a watch on /<plural>/<name> is a watch on that name only
        return lambda obj: labels(obj) and fields(obj) and (name is None or obj['metadata']['name'] == name)

    def _list(self, request: Request, res: resource, info: ResourceInfo,
              ns: str | None) -> dict[str, Any]:
        matches = self._matcher(request)
        found = self._as_list(res, info, [obj for obj in self.store.objects((res.group, res.plural), ns)
                                          if matches(obj)])
        if _wants_table(request):
            return discovery.table(found['items'], self.cluster.columns(res), found['metadata']['resourceVersion'],
                                   self.clock())
        return found

    async def _watch(self, request: Request, raw: aiohttp.web.BaseRequest, res: resource,
                     info: ResourceInfo, ns: str | None) -> aiohttp.web.StreamResponse:
        params, key = request.params, (res.group, res.plural)
        query = watch.WatchQuery(key, ns, self._matcher(request))
        initial, end_bookmark = None, None
        since = params.get('resourceVersion') or '0'
        if params.get('sendInitialEvents') == 'true' or since == '0':
            initial = [obj for obj in self.store.objects(key, ns) if query.matches(obj)]
            position = len(self.store.events)
            if params.get('sendInitialEvents') == 'true' and params.get('allowWatchBookmarks') == 'true':
                end_bookmark = watch.bookmark(info.kind, _api_version(res), self.store.resource_version, True)
        elif since.isdigit():
            position = self.store.events_after(int(since))
        else:
            raise ApiError(400, 'BadRequest', f'invalid resourceVersion {since!r}')
        timeout_s = float(params['timeoutSeconds']) if params.get('timeoutSeconds') else None
        epoch = self.faults.watch_epoch
        return await watch.stream(raw, self.store, query, lambda obj: self._present(request, res, info, obj),
                                  initial, position, end_bookmark, timeout_s, lambda: self.cluster.closing,
                                  lambda: self.faults.watch_epoch != epoch)

    # --- writes ---

    def _write(self, request: Request, res: resource, info: ResourceInfo,
               old: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        """PUT or PATCH of the object, its /status or its /scale."""
        sub, key = request.subresource, (res.group, res.plural)
        view = objects.to_scale(old, self.cluster.scale_paths(res)) if sub == 'scale' else old
        if request.method.value == 'PUT':
            written = request.data
            if not isinstance(written, dict):
                raise ApiError(400, 'BadRequest', 'the request body must be a JSON object')
        else:
            written = _apply_patch(request, view)
        objects.check_resource_version(written, old, qualified(key))
        if sub == 'scale':
            new = objects.from_scale(old, written, self.cluster.scale_paths(res))
        elif sub == 'status':
            new = objects.with_status_of(old, written)
        elif 'status' in info.subresources:
            new = objects.with_status_of(written, old)
        else:
            new = written
        return self.cluster.update(key, old, new, dry_run)

    def _delete(self, request: Request, key: GroupPlural, obj: dict[str, Any]) -> dict[str, Any]:
        options = request.data if isinstance(request.data, dict) else {}
        preconditions = options.get('preconditions') or {}
        for field in ('uid', 'resourceVersion'):
            if preconditions.get(field) and preconditions[field] != obj['metadata'].get(field):
                raise objects.conflict(qualified(key), obj['metadata']['name'])
        policy = options.get('propagationPolicy') or request.params.get('propagationPolicy')
        grace = options.get('gracePeriodSeconds', request.params.get('gracePeriodSeconds'))
        if grace is not None and not str(grace).lstrip('-').isdigit():
            raise ApiError(400, 'BadRequest', f'gracePeriodSeconds must be an integer, not {grace!r}')
        return self.cluster.delete(key, obj, orphan=policy == 'Orphan', grace_s=None if grace is None else int(grace))


def _api_version(res: resource) -> str:
    return f'{res.group}/{res.version}' if res.group else res.version


def _json(payload: Any, code: int = 200) -> aiohttp.web.Response:
    return aiohttp.web.json_response(payload, status=code)


def _content_type(request: Request) -> str:
    return request.headers.get('Content-Type', '').split(';')[0].strip()


def _wants_table(request: Request) -> bool:
    return 'as=Table' in request.headers.get('Accept', '')


def _apply_patch(request: Request, view: dict[str, Any]) -> Any:
    algorithm = _PATCHES.get(_content_type(request))
    if algorithm is None:
        raise ApiError(415, 'UnsupportedMediaType', f'unsupported patch type {_content_type(request)!r}')
    try:
        return algorithm(view, request.data)
    except patching.PatchTestFailed as e:
        raise ApiError(422, 'Invalid', str(e)) from e
    except patching.PatchError as e:
        raise ApiError(422, 'Invalid', f'the patch cannot be applied: {e}') from e
