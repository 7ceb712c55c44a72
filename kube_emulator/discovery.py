"""Pure API-shape documents: discovery lists, CRD -> served resources, and server-side Tables.

Owns: APIGroupList/APIGroup/APIResourceList bodies (core group "v1", preferred = newest version,
scale subresources announced as autoscaling/v1 Scale), what a CustomResourceDefinition registers, and
the meta.k8s.io/v1 Table that `kubectl get` asks for (printer columns). Pure: no emulator state here.
"""
import datetime
import re
from dataclasses import dataclass, field
from typing import Any

from kube_emulator.kmock_seam import ResourceInfo, resource
from kube_emulator.objects import ScalePaths

_VERSION = re.compile(r'^v(\d+)(?:(alpha|beta)(\d+))?$')
Served = list[tuple[resource, ResourceInfo]]


def version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes version order: GA before beta before alpha, then the higher number first."""
    match = _VERSION.match(version)
    if not match:
        return (-1, 0, 0)
    major, stage, minor = match.groups()
    return ({None: 2, 'beta': 1, 'alpha': 0}[stage], int(major), int(minor or 0))


def _group_entry(group: str, versions: set[str]) -> dict[str, Any]:
    ordered = sorted(versions, key=version_priority, reverse=True)
    return {
        'name': group,
        'versions': [{'groupVersion': f'{group}/{v}', 'version': v} for v in ordered],
        'preferredVersion': {'groupVersion': f'{group}/{ordered[0]}', 'version': ordered[0]},
    }


def group_list(served: Served) -> dict[str, Any]:
    """/apis: every named group with its versions."""
    groups: dict[str, set[str]] = {}
    for res, _ in served:
        if res.group:
            groups.setdefault(res.group, set()).add(res.version)
    return {'kind': 'APIGroupList', 'apiVersion': 'v1',
            'groups': [_group_entry(group, versions) for group, versions in sorted(groups.items())]}


def group(served: Served, name: str) -> dict[str, Any] | None:
    """/apis/<group>, or None if nothing is served in that group."""
    versions = {res.version for res, _ in served if res.group == name}
    return dict(_group_entry(name, versions), kind='APIGroup', apiVersion='v1') if versions else None


def resource_list(served: Served, group_name: str, version: str) -> dict[str, Any] | None:
    """/api/v1 or /apis/<group>/<version>: the resources and their subresources."""
    entries = []
    for res, info in sorted(served, key=lambda pair: pair[0].plural):
        if (res.group, res.version) != (group_name, version):
            continue
        kind = info.kind or res.plural.capitalize()
        entries.append({
            'name': res.plural, 'singularName': info.singular or kind.lower(), 'namespaced': bool(info.namespaced),
            'kind': kind, 'verbs': sorted(info.verbs), 'shortNames': sorted(info.shortnames),
            'categories': sorted(info.categories),
        })
        for sub in sorted(info.subresources):
            entry = {'name': f'{res.plural}/{sub}', 'singularName': '', 'namespaced': bool(info.namespaced),
                     'kind': kind, 'verbs': ['get', 'patch', 'update']}
            if sub == 'scale':
                entry.update(group='autoscaling', version='v1', kind='Scale')
            entries.append(entry)
    if not entries and group_name:
        return None
    group_version = f'{group_name}/{version}' if group_name else version
    return {'kind': 'APIResourceList', 'apiVersion': 'v1', 'groupVersion': group_version, 'resources': entries}


@dataclass(frozen=True)
class CrdVersion:
    """What one served version of a CRD registers."""
    res: resource
    info: ResourceInfo
    scale: ScalePaths | None
    columns: tuple[dict[str, Any], ...] = field(default=())


def crd_versions(crd: dict[str, Any]) -> list[CrdVersion]:
    """The served versions of a CustomResourceDefinition, as resources to register."""
    spec = crd.get('spec') or {}
    names = spec.get('names') or {}
    result = []
    for version in spec.get('versions') or []:
        if not version.get('served', True):
            continue
        subresources = version.get('subresources') or {}
        scale = subresources.get('scale')
        info = ResourceInfo(
            kind=names['kind'], singular=names.get('singular') or names['kind'].lower(),
            namespaced=spec.get('scope', 'Namespaced') == 'Namespaced',
            verbs={'create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'},
            shortnames=set(names.get('shortNames') or []), categories=set(names.get('categories') or []),
            subresources={name for name in ('status', 'scale') if name in subresources},
        )
        paths = ScalePaths(scale['specReplicasPath'], scale['statusReplicasPath'],
                           scale.get('labelSelectorPath')) if scale else None
        res = resource(spec['group'], version['name'], names['plural'])
        result.append(CrdVersion(res, info, paths, tuple(version.get('additionalPrinterColumns') or [])))
    return result


def crd_status(crd: dict[str, Any], now: str) -> dict[str, Any]:
    """The status the apiextensions controller gives an accepted CRD."""
    spec = crd.get('spec') or {}
    conditions = [{'type': kind, 'status': 'True', 'reason': reason, 'message': message, 'lastTransitionTime': now}
                  for kind, reason, message in (
                      ('NamesAccepted', 'NoConflicts', 'no conflicts found'),
                      ('Established', 'InitialNamesAccepted', 'the initial names have been accepted'))]
    stored = [v['name'] for v in spec.get('versions') or [] if v.get('storage')]
    return {'conditions': conditions, 'acceptedNames': spec.get('names') or {}, 'storedVersions': stored}


# --- Tables (server-side printing) ---

# A key may hold escaped dots (`.metadata.annotations.example\.com/x`), as kubectl's JSONPath allows.
_TOKEN = re.compile(r'\.((?:\\\.|[^.\[\\])+)|\[\?\(@\.([\w.-]+)\s*==\s*["\']([^"\']*)["\']\)\]|\[(\d+)\]')


def eval_json_path(obj: Any, path: str) -> Any:
    r"""A printer column's jsonPath: `.a.b`, `.a.b\.c`, `[0]`, `[?(@.type=="Ready")]` (first match); else None."""
    value = obj
    for key, filter_key, filter_value, index in _TOKEN.findall(path.strip()):
        if key:
            key = key.replace('\\.', '.')
            value = value.get(key) if isinstance(value, dict) else None
        elif filter_key:
            matches = [item for item in value or [] if isinstance(item, dict)
                       and str(eval_json_path(item, '.' + filter_key)) == filter_value]
            value = matches[0] if matches else None
        else:
            value = value[int(index)] if isinstance(value, list) and int(index) < len(value) else None
    return value


def age(timestamp: str | None, now: datetime.datetime) -> str | None:
    """A creationTimestamp as kubectl's short age: 7s, 3m, 5h, 2d."""
    if not timestamp:
        return None
    then = datetime.datetime.strptime(timestamp, '%Y-%m-%dT%H:%M:%SZ').replace(tzinfo=datetime.UTC)
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (('d', 86400), ('h', 3600), ('m', 60)):
        if seconds >= size:
            return f'{seconds // size}{unit}'
    return f'{seconds}s'


def _cell(obj: dict[str, Any], column: dict[str, Any], now: datetime.datetime) -> Any:
    value = eval_json_path(obj, column['jsonPath'])
    if column.get('type') == 'date':
        return age(value, now)
    return value


# A few built-in kinds get printer columns too (real servers print more, and differently: "2/2").
BUILTIN_COLUMNS: dict[tuple[str, str], tuple[dict[str, Any], ...]] = {
    ('', 'pods'): (
        {'name': 'Status', 'type': 'string', 'jsonPath': '.status.phase'},
        {'name': 'IP', 'type': 'string', 'jsonPath': '.status.podIP'},
        {'name': 'Age', 'type': 'date', 'jsonPath': '.metadata.creationTimestamp'},
    ),
    ('apps', 'deployments'): (
        {'name': 'Replicas', 'type': 'integer', 'jsonPath': '.spec.replicas'},
        {'name': 'Ready', 'type': 'integer', 'jsonPath': '.status.readyReplicas'},
        {'name': 'Available', 'type': 'integer', 'jsonPath': '.status.availableReplicas'},
        {'name': 'Age', 'type': 'date', 'jsonPath': '.metadata.creationTimestamp'},
    ),
}
_NAME = {'name': 'Name', 'type': 'string', 'format': 'name', 'description': 'Name', 'priority': 0}
_AGE = {'name': 'Age', 'type': 'date', 'jsonPath': '.metadata.creationTimestamp'}


def table(objects: list[dict[str, Any]], columns: tuple[dict[str, Any], ...], resource_version: str,
          now: datetime.datetime) -> dict[str, Any]:
    """A meta.k8s.io/v1 Table: Name, then the printer columns (or Age if there are none)."""
    columns = columns or (_AGE,)
    definitions = [_NAME] + [{'name': c['name'], 'type': c.get('type', 'string'), 'format': c.get('format', ''),
                              'description': c.get('description', ''), 'priority': c.get('priority', 0)}
                             for c in columns]
    rows = [{'cells': [obj['metadata']['name']] + [_cell(obj, c, now) for c in columns], 'object': obj}
            for obj in objects]
    return {'kind': 'Table', 'apiVersion': 'meta.k8s.io/v1', 'metadata': {'resourceVersion': resource_version},
            'columnDefinitions': definitions, 'rows': rows}
