"""Pure rules for what the API server does to an object on each write (no I/O, no storage).

Owns: metadata stamping on create, what an update may change (immutable metadata, generation bumped on
spec changes only, status vs. main resource split), the autoscaling/v1 Scale view of an object and the
Status error bodies. The emulator calls these; the store only keeps what they return.
"""
import copy
import datetime
import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from kube_emulator.selectors import format_match_labels

_IMMUTABLE_META = ('uid', 'name', 'namespace', 'creationTimestamp', 'deletionTimestamp', 'selfLink')
_NOT_SPEC = ('metadata', 'status', 'apiVersion', 'kind')


class ApiError(Exception):
    """An API failure with a metav1.Status reason (NotFound, AlreadyExists, Conflict, Invalid...)."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> dict[str, Any]:
        """The metav1.Status body that goes with the HTTP code."""
        return {
            'kind': 'Status', 'apiVersion': 'v1', 'metadata': {}, 'status': 'Failure',
            'message': self.message, 'reason': self.reason, 'details': self.details, 'code': self.code,
        }


def not_found(plural: str, name: str) -> ApiError:
    return ApiError(404, 'NotFound', f'{plural} "{name}" not found', {'name': name, 'kind': plural})


def conflict(plural: str, name: str) -> ApiError:
    return ApiError(409, 'Conflict', f'Operation cannot be fulfilled on {plural} "{name}": the object has been'
                    ' modified; please apply your changes to the latest version and try again',
                    {'name': name, 'kind': plural})


def now_rfc3339(now: datetime.datetime) -> str:
    return now.astimezone(datetime.UTC).strftime('%Y-%m-%dT%H:%M:%SZ')


def random_suffix(length: int = 5) -> str:
    # The API server's generateName alphabet: no vowels, no look-alike digits.
    return ''.join(secrets.choice('bcdfghjklmnpqrstvwxz2456789') for _ in range(length))


def spec_part(obj: dict[str, Any], status_is_spec: bool = False) -> dict[str, Any]:
    """Everything whose change bumps metadata.generation: all but metadata, apiVersion, kind, and status
    (status too counts for kinds without a status subresource, as in Kubernetes)."""
    ignored = ('metadata', 'apiVersion', 'kind') if status_is_spec else _NOT_SPEC
    return {key: value for key, value in obj.items() if key not in ignored}


def stamp_new(body: dict[str, Any], namespace: str | None, has_status: bool, now: datetime.datetime) -> dict[str, Any]:
    """A created object: name from generateName if needed, uid, creationTimestamp, generation 1.

    The caller sets resourceVersion. Status is dropped for kinds with a status subresource (as the
    API server resets it on create).
    """
    obj = copy.deepcopy(body)
    meta = obj.setdefault('metadata', {})
    if not meta.get('name'):
        if not meta.get('generateName'):
            raise ApiError(422, 'Invalid', 'metadata.name or metadata.generateName is required')
        meta['name'] = meta['generateName'] + random_suffix()
    if namespace is None:
        meta.pop('namespace', None)
    else:
        meta['namespace'] = namespace
    for key in ('deletionTimestamp', 'deletionGracePeriodSeconds', 'resourceVersion', 'selfLink'):
        meta.pop(key, None)
    meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(now), generation=1)
    if has_status:
        obj.pop('status', None)
    return obj


def carry_over(old: dict[str, Any], new: dict[str, Any], has_status: bool = True) -> dict[str, Any]:
    """An updated object: identity metadata kept from old; generation +1 only if the spec changed.

    has_status: the kind has a status subresource (then status changes do not bump generation).
    """
    obj = copy.deepcopy(new)
    meta = obj.setdefault('metadata', {})
    for key in _IMMUTABLE_META:
        meta.pop(key, None)
        if key in old['metadata']:
            meta[key] = old['metadata'][key]
    generation = old['metadata'].get('generation', 1)
    changed = spec_part(old, not has_status) != spec_part(obj, not has_status)
    meta['generation'] = generation + (1 if changed else 0)
    meta['resourceVersion'] = old['metadata']['resourceVersion']
    for key in ('apiVersion', 'kind'):
        if key in old:
            obj[key] = old[key]
    return obj


def with_status_of(base: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """base with source's status (or none): how status and main-resource writes are split."""
    obj = copy.deepcopy(base)
    obj.pop('status', None)
    if 'status' in source:
        obj['status'] = copy.deepcopy(source['status'])
    return obj


def check_resource_version(body: Any, current: dict[str, Any], plural: str) -> None:
    """A write that names a resourceVersion must name the current one (optimistic concurrency)."""
    wanted = ((body or {}).get('metadata') or {}).get('resourceVersion') if isinstance(body, dict) else None
    if wanted and wanted != current['metadata']['resourceVersion']:
        raise conflict(plural, current['metadata']['name'])


def get_path(obj: dict[str, Any], path: str) -> Any:
    """The value at a dotted path such as `.spec.replicas` (None if absent)."""
    value: Any = obj
    for part in path.strip('.').split('.'):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def set_path(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of obj with the dotted path set (intermediate dicts created)."""
    result = copy.deepcopy(obj)
    parts = path.strip('.').split('.')
    node = result
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return result


@dataclass(frozen=True)
class ScalePaths:
    """Where a kind keeps what /scale shows (a CRD's scale subresource, or the built-in fields)."""
    spec_replicas_path: str = '.spec.replicas'
    status_replicas_path: str = '.status.replicas'
    label_selector_path: str | None = None  # None: built-in kinds derive it from .spec.selector


def to_scale(obj: dict[str, Any], paths: ScalePaths) -> dict[str, Any]:
    """The autoscaling/v1 Scale view of an object."""
    meta = obj['metadata']
    if paths.label_selector_path is not None:
        selector = get_path(obj, paths.label_selector_path)
    else:
        raw = (obj.get('spec') or {}).get('selector')
        is_label_selector = isinstance(raw, dict) and ({'matchLabels', 'matchExpressions'} & raw.keys())
        selector = format_match_labels(raw if is_label_selector else {'matchLabels': raw}) if raw else None
    status: dict[str, Any] = {'replicas': get_path(obj, paths.status_replicas_path) or 0}
    if selector:
        status['selector'] = selector
    return {
        'apiVersion': 'autoscaling/v1', 'kind': 'Scale',
        'metadata': {key: meta[key] for key in ('name', 'namespace', 'uid', 'resourceVersion', 'creationTimestamp')
                     if key in meta},
        'spec': {'replicas': get_path(obj, paths.spec_replicas_path) or 0},
        'status': status,
    }


def from_scale(obj: dict[str, Any], scale: dict[str, Any], paths: ScalePaths) -> dict[str, Any]:
    """obj with the replicas a written Scale asks for."""
    replicas = (scale.get('spec') or {}).get('replicas')
    if not isinstance(replicas, int) or replicas < 0:
        raise ApiError(422, 'Invalid', f'Scale.spec.replicas must be a non-negative integer, not {replicas!r}')
    return set_path(obj, paths.spec_replicas_path, replicas)
