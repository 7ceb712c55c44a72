"""KubeEmulator: kmock's Kubernetes scaffold plus the API-server semantics a kopf operator, kubectl and
Helm rely on. Pinned to kmock 0.8 (it overrides KubernetesScaffold.__call__ and discovery handlers).

Owns: request routing for resource paths, write semantics (objects.py), CRD registration, finalizers,
garbage collection and the fake Deployment controller (controllers.py). kmock keeps: the HTTP server
(kmock.Server), the resource catalogue (`.resources`, load_bundled), /version, /api and 404s.
Not emulated: protobuf, OpenAPI, admission, defaulting, schema validation, field ownership, RBAC.
"""
import asyncio
import datetime
from collections.abc import Callable
from typing import Any

import aiohttp.web
import attrs
import kmock

from tests.kube_emulator import controllers, discovery, objects, patching, watch
from tests.kube_emulator.objects import ApiError, ScalePaths
from tests.kube_emulator.routing import parse_request
from tests.kube_emulator.selectors import SelectorError, parse_field_selector, parse_label_selector
from tests.kube_emulator.store import GroupPlural, Store

CRDS: GroupPlural = ('apiextensions.k8s.io', 'customresourcedefinitions')
DEPLOYMENTS: GroupPlural = ('apps', 'deployments')
NAMESPACES: GroupPlural = ('', 'namespaces')
_BUILTIN_SCALABLE = {DEPLOYMENTS, ('apps', 'replicasets'), ('apps', 'statefulsets'), ('', 'replicationcontrollers')}
_PATCHES: dict[str, Callable[[Any, Any], Any]] = {
    'application/merge-patch+json': patching.merge_patch,
    'application/strategic-merge-patch+json': patching.strategic_merge_patch,
    'application/apply-patch+yaml': patching.strategic_merge_patch,  # server-side apply, minus field ownership
    'application/json-patch+json': patching.json_patch,
}


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@attrs.define(kw_only=True)
class KubeEmulator(kmock.KubernetesScaffold):
    """An in-memory API server; serve it with `kmock.Server(emulator, host='127.0.0.1')`."""

    clock: Callable[[], datetime.datetime] = utc_now
    store: Store = attrs.field(factory=Store, init=False)
    _custom: dict[tuple[str, str, str], discovery.CrdVersion] = attrs.field(factory=dict, init=False)
    _closing: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.resources.load_bundled()
        for name in ('default', 'kube-system', 'kube-public'):
            self._create(NAMESPACES, None, {'apiVersion': 'v1', 'kind': 'Namespace', 'metadata': {'name': name}})

    def close(self) -> None:
        """End all watches (call before stopping the server) and stop the fake controllers."""
        self._closing = True
        self.store.wake_all()

    # --- HTTP entry (replaces kmock's, whose path parser breaks on /api/v1/namespaces) ---

    async def __call__(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        request = await parse_request(raw, id=len(self._requests))
        self._requests.append(request)
        try:
            if request.resource is not None and request.resource.plural is not None:
                return await self._serve(request, raw)
            return await self._handle(request)  # kmock: discovery, /version, 404
        except ApiError as e:
            return aiohttp.web.json_response(e.status(), status=e.code)
        except Exception as e:  # a bug here must reach the client as a 500 Status, not a dropped connection
            return await self._render_error(e)

    # --- discovery (kmock's has groupVersion "/v1" and a random preferred version) ---

    def _served(self) -> discovery.Served:
        return [(res, self.resources[res]) for res in self.resources]

    async def _serve_apis(self, request: kmock.Request) -> Any:
        return discovery.group_list(self._served())

    async def _serve_group(self, request: kmock.Request) -> Any:
        found = discovery.group(self._served(), request.resource.group)
        if found is None:
            raise _no_resource()
        return found

    async def _serve_version(self, request: kmock.Request) -> Any:
        found = discovery.resource_list(self._served(), request.resource.group, request.resource.version)
        if found is None:
            raise _no_resource()
        return found

    # --- routing ---

    def _lookup(self, request: kmock.Request) -> tuple[kmock.resource, kmock.ResourceInfo]:
        for res in self.resources:
            if res == request.resource:
                return res, self.resources[res]
        raise _no_resource()

    async def _serve(self, request: kmock.Request, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        res, info = self._lookup(request)
        key: GroupPlural = (res.group, res.plural)
        if request.namespace is not None and not info.namespaced:
            raise _no_resource()
        ns = request.namespace if info.namespaced else None
        sub, name, method = request.subresource, request.name, request.method.value
        if sub is not None and (sub not in ('status', 'scale') or sub not in info.subresources):
            raise _no_resource()
        if method == 'GET' and request.params.get('watch') in ('true', '1'):
            return await self._watch(request, raw, res, info, ns)
        if method == 'GET' and name is None:
            return _json(self._list(request, res, info, ns))
        if method == 'POST' and name is None and info.namespaced and ns is None:
            raise ApiError(405, 'MethodNotAllowed', f'{res.plural} are created in a namespace: POST to its path')
        if method == 'POST' and name is None:
            return _json(self._present(request, res, info, self._create(key, ns, request.data,
                                                                         dry_run='dryRun' in request.params)), 201)
        if name is None and method == 'DELETE':
            return _json(self._delete_collection(request, res, info, ns))
        if name is None:
            raise ApiError(405, 'MethodNotAllowed', f'{method} is not supported on a collection')
        old = self.store.get(key, ns, name)
        if old is None and method == 'PATCH' and _content_type(request) == 'application/apply-patch+yaml':
            body = dict(request.data or {}, metadata=dict((request.data or {}).get('metadata') or {}, name=name))
            return _json(self._present(request, res, info, self._create(key, ns, body)), 201)
        if old is None:
            raise objects.not_found(_qualified(res), name)
        if method == 'GET':
            return _json(self._view(request, res, info, old))
        if method == 'DELETE' and 'dryRun' in request.params:
            return _json(self._present(request, res, info, old))
        if method == 'DELETE':
            return _json(self._present(request, res, info, self._delete_named(request, res, key, old)))
        if method not in ('PUT', 'PATCH'):
            raise ApiError(405, 'MethodNotAllowed', f'{method} is not supported')
        stored = self._write(request, res, info, key, old, dry_run='dryRun' in request.params)
        return _json(self._view(request, res, info, stored))

    # --- reads ---

    def _present(self, request: kmock.Request | None, res: kmock.resource, info: kmock.ResourceInfo,
                 obj: dict[str, Any]) -> dict[str, Any]:
        """obj as this version of the resource, or as a one-row Table if the request asks for Tables."""
        obj = dict(obj, apiVersion=f'{res.group}/{res.version}' if res.group else res.version, kind=info.kind)
        if request is not None and _wants_table(request):
            return discovery.table([obj], self._columns(res), obj['metadata']['resourceVersion'], self.clock())
        return obj

    def _view(self, request: kmock.Request, res: kmock.resource, info: kmock.ResourceInfo,
              obj: dict[str, Any]) -> dict[str, Any]:
        if request.subresource == 'scale':
            return objects.to_scale(obj, self._scale_paths(res))
        return self._present(request, res, info, obj)

    def _matcher(self, request: kmock.Request) -> Callable[[dict[str, Any]], bool]:
        try:
            labels = parse_label_selector(request.params.get('labelSelector'))
            fields = parse_field_selector(request.params.get('fieldSelector'))
        except SelectorError as e:
            raise ApiError(400, 'BadRequest', str(e))
        name = request.name  # a watch on /<plural>/<name> is a watch on that name only
        return lambda obj: labels(obj) and fields(obj) and (name is None or obj['metadata']['name'] == name)

    def _list(self, request: kmock.Request, res: kmock.resource, info: kmock.ResourceInfo,
              ns: str | None) -> dict[str, Any]:
        matches = self._matcher(request)
        items = [self._present(None, res, info, obj)
                 for obj in self.store.objects((res.group, res.plural), ns) if matches(obj)]
        rv = str(self.store.resource_version)
        if _wants_table(request):
            return discovery.table(items, self._columns(res), rv, self.clock())
        api_version = f'{res.group}/{res.version}' if res.group else res.version
        return {'kind': f'{info.kind}List', 'apiVersion': api_version, 'metadata': {'resourceVersion': rv},
                'items': items}

    async def _watch(self, request: kmock.Request, raw: aiohttp.web.BaseRequest, res: kmock.resource,
                     info: kmock.ResourceInfo, ns: str | None) -> aiohttp.web.StreamResponse:
        params, key = request.params, (res.group, res.plural)
        query = watch.WatchQuery(key, ns, self._matcher(request))
        initial, end_bookmark = None, None
        since = params.get('resourceVersion') or '0'
        if params.get('sendInitialEvents') == 'true' or since == '0':
            initial = [obj for obj in self.store.objects(key, ns) if query.matches(obj)]
            position = len(self.store.events)
            if params.get('sendInitialEvents') == 'true' and params.get('allowWatchBookmarks') == 'true':
                api_version = f'{res.group}/{res.version}' if res.group else res.version
                end_bookmark = watch.bookmark(info.kind, api_version, self.store.resource_version, True)
        elif since.isdigit():
            position = self.store.events_after(int(since))
        else:
            raise ApiError(400, 'BadRequest', f'invalid resourceVersion {since!r}')
        timeout_s = float(params['timeoutSeconds']) if params.get('timeoutSeconds') else None
        return await watch.stream(raw, self.store, query, lambda obj: self._present(request, res, info, obj),
                                  initial, position, end_bookmark, timeout_s, lambda: self._closing)

    def _columns(self, res: kmock.resource) -> tuple[dict[str, Any], ...]:
        custom = self._custom.get((res.group, res.version, res.plural))
        return custom.columns if custom else discovery.BUILTIN_COLUMNS.get((res.group, res.plural), ())

    def _scale_paths(self, res: kmock.resource) -> ScalePaths:
        custom = self._custom.get((res.group, res.version, res.plural))
        if custom is not None and custom.scale is not None:
            return custom.scale
        if (res.group, res.plural) in _BUILTIN_SCALABLE:
            return ScalePaths()
        raise _no_resource()

    # --- writes ---

    def _create(self, key: GroupPlural, ns: str | None, body: Any, dry_run: bool = False) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, 'BadRequest', 'the request body must be a JSON object')
        body_ns = (body.get('metadata') or {}).get('namespace')
        if ns is not None and body_ns and body_ns != ns:
            raise ApiError(400, 'BadRequest', 'the namespace of the provided object does not match the namespace'
                           ' sent on the request')
        info = self._info(key)
        obj = objects.stamp_new(body, ns, 'status' in info.subresources, self.clock())
        self._validate(key, obj)
        name = obj['metadata']['name']
        if self.store.get(key, ns, name) is not None:
            raise ApiError(409, 'AlreadyExists', f'{_qualified_key(key)} "{name}" already exists',
                           {'name': name, 'kind': key[1]})
        if dry_run:
            return dict(obj, metadata=dict(obj['metadata'], resourceVersion=str(self.store.resource_version)))
        stored = self.store.put(key, obj, 'ADDED')
        self._after_write(key, stored)
        return stored

    def _write(self, request: kmock.Request, res: kmock.resource, info: kmock.ResourceInfo, key: GroupPlural,
               old: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        """PUT or PATCH of the object, its /status or its /scale."""
        sub = request.subresource
        view = objects.to_scale(old, self._scale_paths(res)) if sub == 'scale' else old
        if request.method.value == 'PUT':
            written = request.data
            if not isinstance(written, dict):
                raise ApiError(400, 'BadRequest', 'the request body must be a JSON object')
        else:
            written = _apply_patch(request, view)
        objects.check_resource_version(written, old, _qualified(res))
        if sub == 'scale':
            new = objects.from_scale(old, written, self._scale_paths(res))
        elif sub == 'status':
            new = objects.with_status_of(old, written)
        elif 'status' in info.subresources:
            new = objects.with_status_of(written, old)
        else:
            new = written
        return self._update(key, old, new, dry_run)

    def _update(self, key: GroupPlural, old: dict[str, Any], new: dict[str, Any],
                dry_run: bool = False) -> dict[str, Any]:
        merged = objects.carry_over(old, new, has_status='status' in self._info(key).subresources)
        self._validate(key, merged)
        if dry_run:
            return merged
        if merged == old:
            return old  # a no-op write: no new resourceVersion, no event (as the API server does)
        if merged['metadata'].get('deletionTimestamp') and not merged['metadata'].get('finalizers'):
            return self._remove(key, merged)
        stored = self.store.put(key, merged, 'MODIFIED', old=old)
        self._after_write(key, stored)
        return stored

    def _delete_named(self, request: kmock.Request, res: kmock.resource, key: GroupPlural,
                      obj: dict[str, Any]) -> dict[str, Any]:
        options = request.data if isinstance(request.data, dict) else {}
        preconditions = options.get('preconditions') or {}
        for field in ('uid', 'resourceVersion'):
            if preconditions.get(field) and preconditions[field] != obj['metadata'].get(field):
                raise objects.conflict(_qualified(res), obj['metadata']['name'])
        policy = options.get('propagationPolicy') or request.params.get('propagationPolicy')
        return self._delete(key, obj, orphan=policy == 'Orphan')

    def _delete(self, key: GroupPlural, obj: dict[str, Any], orphan: bool = False) -> dict[str, Any]:
        """Delete now, or (with finalizers) mark with deletionTimestamp and wait for them to go."""
        if not obj['metadata'].get('finalizers'):
            return self._remove(key, obj, orphan)
        if obj['metadata'].get('deletionTimestamp'):
            return obj
        marked = dict(obj, metadata=dict(obj['metadata'], deletionTimestamp=objects.now_rfc3339(self.clock())))
        stored = self.store.put(key, marked, 'MODIFIED', old=obj)
        return stored

    def _delete_collection(self, request: kmock.Request, res: kmock.resource, info: kmock.ResourceInfo,
                           ns: str | None) -> dict[str, Any]:
        key, matches = (res.group, res.plural), self._matcher(request)
        deleted = [self._delete(key, obj) for obj in self.store.objects(key, ns) if matches(obj)]
        return {'kind': f'{info.kind}List', 'apiVersion': f'{res.group}/{res.version}' if res.group else res.version,
                'metadata': {'resourceVersion': str(self.store.resource_version)}, 'items': deleted}

    def _remove(self, key: GroupPlural, obj: dict[str, Any], orphan: bool = False) -> dict[str, Any]:
        final = self.store.remove(key, obj)
        if key == CRDS:
            self._unregister_crd(final)
        if key == NAMESPACES:
            for other in self.store.resources():
                for item in self.store.objects(other, final['metadata']['name']):
                    self._delete(other, item)
        if not orphan:
            self._soon(self._collect_garbage)
        return final

    # --- what follows a write: CRD registration and the fake controllers ---

    def _after_write(self, key: GroupPlural, obj: dict[str, Any]) -> None:
        if key == CRDS:
            self._register_crd(obj)
            self._soon(self._establish_crd, obj['metadata']['name'])
        if key == DEPLOYMENTS and not obj['metadata'].get('deletionTimestamp'):
            self._soon(self._reconcile_deployment, obj['metadata']['namespace'], obj['metadata']['name'])

    def _soon(self, callback: Callable[..., None], *args: Any) -> None:
        # Controllers act after the write's response, as real ones do; none run once closing.
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # writes made before serving (seeding) need no controller
        if not self._closing:
            loop.call_soon(self._run_controller, callback, *args)

    def _run_controller(self, callback: Callable[..., None], *args: Any) -> None:
        if not self._closing:
            callback(*args)

    def _validate(self, key: GroupPlural, obj: dict[str, Any]) -> None:
        if key == CRDS:
            try:
                discovery.crd_versions(obj)
            except (KeyError, TypeError) as e:
                raise ApiError(422, 'Invalid', f'CustomResourceDefinition is invalid: missing {e}')

    def _register_crd(self, crd: dict[str, Any]) -> None:
        self._unregister_crd(crd, keep_objects=True)
        for version in discovery.crd_versions(crd):
            self.resources[version.res] = version.info
            self._custom[(version.res.group, version.res.version, version.res.plural)] = version

    def _unregister_crd(self, crd: dict[str, Any], keep_objects: bool = False) -> None:
        spec = crd.get('spec') or {}
        group, plural = spec.get('group'), (spec.get('names') or {}).get('plural')
        for res in [res for res in self.resources if (res.group, res.plural) == (group, plural)]:
            del self.resources[res]
            self._custom.pop((res.group, res.version, res.plural), None)
        if not keep_objects:
            for obj in self.store.objects((group, plural)):
                self._remove((group, plural), obj)

    def _establish_crd(self, name: str) -> None:
        crd = self.store.get(CRDS, None, name)
        if crd is None:
            return
        status = discovery.crd_status(crd, objects.now_rfc3339(self.clock()))
        conditions = {c['type']: c['status'] for c in (crd.get('status') or {}).get('conditions') or []}
        if conditions.get('Established') != 'True' or (crd.get('status') or {}).get('acceptedNames') != status['acceptedNames']:
            self._update(CRDS, crd, dict(crd, status=status))

    def _reconcile_deployment(self, namespace: str, name: str) -> None:
        deployment = self.store.get(DEPLOYMENTS, namespace, name)
        if deployment is None or deployment['metadata'].get('deletionTimestamp'):
            return
        status = controllers.deployment_status(deployment, objects.now_rfc3339(self.clock()))
        if deployment.get('status') != status:
            self._update(DEPLOYMENTS, deployment, dict(deployment, status=status))

    def _collect_garbage(self) -> None:
        live = {obj['metadata']['uid'] for key in self.store.resources() for obj in self.store.objects(key)}
        for key in self.store.resources():
            for obj in self.store.objects(key):
                if controllers.is_orphaned(obj, live) and not obj['metadata'].get('deletionTimestamp'):
                    self._delete(key, obj)

    def _info(self, key: GroupPlural) -> kmock.ResourceInfo:
        for res in self.resources:
            if (res.group, res.plural) == key:
                return self.resources[res]
        raise _no_resource()


def _no_resource() -> ApiError:
    return ApiError(404, 'NotFound', 'the server could not find the requested resource')


def _qualified(res: kmock.resource) -> str:
    return _qualified_key((res.group, res.plural))


def _qualified_key(key: GroupPlural) -> str:
    return f'{key[1]}.{key[0]}' if key[0] else key[1]


def _json(payload: Any, code: int = 200) -> aiohttp.web.Response:
    return aiohttp.web.json_response(payload, status=code)


def _content_type(request: kmock.Request) -> str:
    return request.headers.get('Content-Type', '').split(';')[0].strip()


def _wants_table(request: kmock.Request) -> bool:
    return 'as=Table' in request.headers.get('Accept', '')


def _apply_patch(request: kmock.Request, view: dict[str, Any]) -> Any:
    algorithm = _PATCHES.get(_content_type(request))
    if algorithm is None:
        raise ApiError(415, 'UnsupportedMediaType', f'unsupported patch type {_content_type(request)!r}')
    try:
        return algorithm(view, request.data)
    except patching.PatchTestFailed as e:
        raise ApiError(422, 'Invalid', str(e))
    except patching.PatchError as e:
        raise ApiError(422, 'Invalid', f'the patch cannot be applied: {e}')
