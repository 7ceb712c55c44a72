"""Request parsing for the emulator: URL path -> (group, version, namespace, plural, name, subresource).

kmock 0.8's parser fails on `/api/v1/namespaces` and reads `/api/v1/namespaces/x` as a namespace with
no resource; this one knows that `namespaces` is also a resource. Pure: kmock_seam.py turns the parts
into kmock's Request.
"""
import json
from dataclasses import dataclass
from typing import Any

import yaml


@dataclass(frozen=True)
class ApiPath:
    group: str | None = None  # None: not a Kubernetes API path at all
    version: str | None = None
    namespace: str | None = None
    plural: str | None = None
    name: str | None = None
    subresource: str | None = None


def parse_path(path: str) -> ApiPath:
    """Split an API path; `/api/v1/namespaces/x/status` is namespace x's status subresource."""
    parts = [part for part in path.strip('/').split('/') if part]
    if len(parts) >= 2 and parts[0] == 'api':
        group, version, rest = '', parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == 'apis':
        group, version, rest = parts[1], parts[2], parts[3:]
    elif len(parts) == 2 and parts[0] == 'apis':
        return ApiPath(group=parts[1])
    else:
        return ApiPath()
    namespace = None
    is_namespace_subresource = group == '' and len(rest) == 3 and rest[2] in ('status', 'finalize')
    if rest[:1] == ['namespaces'] and len(rest) >= 3 and not is_namespace_subresource:
        namespace, rest = rest[1], rest[2:]
    return ApiPath(group, version, namespace,
                   plural=rest[0] if rest else None,
                   name=rest[1] if len(rest) > 1 else None,
                   subresource='/'.join(rest[2:]) or None)


def decode_body(text: str) -> Any:
    """JSON, or YAML (server-side apply bodies); None if empty or undecodable."""
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError:
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return None
