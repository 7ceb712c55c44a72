"""The one seam between the emulator and kmock 0.8 (pinned in the test extra: kmock==0.8).

Owns everything that knows kmock's internals: the KubernetesScaffold subclass whose request entry
point and discovery handlers are replaced by plain hooks, and the building of kmock's Request (its
fields). It re-exports the kmock types the rest of kube_emulator uses; no other module imports
kmock (an import-linter contract in pyproject.toml holds it). A kmock upgrade is checked here.
"""
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import enums, parsing

from kube_emulator.routing import decode_body, parse_path

Request = kmock.Request
ResourceInfo = kmock.ResourceInfo
ResourcesArray = kmock.ResourcesArray
Server = kmock.Server
resource = kmock.resource

__all__ = ['Request', 'ResourceInfo', 'ResourcesArray', 'ScaffoldBase', 'Server', 'read_request', 'resource']


async def read_request(raw: aiohttp.web.BaseRequest, *, id: int) -> Request:
    """kmock's Request from an aiohttp one, with our path parser (kmock's fails on /api/v1/namespaces)."""
    body = await raw.read()
    text = body.decode('utf-8', errors='replace')
    path = parse_path(raw.path)
    kmock_path = parsing.ParsedPath(path.group, path.version, path.plural, path.namespace, path.name, path.subresource)
    method = enums.method(raw.method)
    res = None if path.group is None else resource(group=path.group, version=path.version, plural=path.plural)
    return Request(
        id=id, raw_request=raw, url=raw.url, method=raw.method, params=dict(raw.query),
        headers=dict(raw.headers), cookies=dict(raw.cookies), body=body, text=text, data=decode_body(text),
        action=parsing.guess_k8s(kmock_path, method, dict(raw.query)), resource=res,
        namespace=path.namespace, name=path.name, subresource=path.subresource,
    )


@attrs.define(kw_only=True)
class ScaffoldBase(kmock.KubernetesScaffold):
    """kmock's scaffold (server glue, resource catalogue `.resources`, /version, /api, the 404
    fallback) with two doors for a subclass: `serve(request, raw)` gets every request, and
    `discovery_*` answer /apis, /apis/<group> and /apis/<group>/<version>."""

    async def __call__(self, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        request = await read_request(raw, id=len(self._requests))
        self._requests.append(request)  # kmock's request log
        try:
            return await self.serve(request, raw)
        except Exception as e:  # a bug must reach the client as a 500 Status, not a dropped connection
            return await self._render_error(e)

    async def serve(self, request: Request, raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        raise NotImplementedError

    async def serve_by_kmock(self, request: Request) -> aiohttp.web.StreamResponse:
        """kmock's own handling: discovery (through the hooks below), /version, 404."""
        return await self._handle(request)

    def discovery_groups(self) -> Any:
        raise NotImplementedError

    def discovery_group(self, group: str) -> Any:
        raise NotImplementedError

    def discovery_version(self, group: str, version: str) -> Any:
        raise NotImplementedError

    async def _serve_apis(self, request: Request) -> Any:
        return self.discovery_groups()

    async def _serve_group(self, request: Request) -> Any:
        return self.discovery_group(request.resource.group)

    async def _serve_version(self, request: Request) -> Any:
        return self.discovery_version(request.resource.group, request.resource.version)
