"""Pure patch algorithms the emulator applies to stored objects (JSON in, JSON out).

Owns: RFC 7386 merge patch, RFC 6902 JSON patch (a failed `test` raises PatchTestFailed, which the
emulator maps to 422), and a strategic merge patch that merges lists of named dicts by `name`.
Not owned: field ownership for server-side apply, and any per-kind patch strategy other than "lists
whose items all carry a `name` merge by name" (what Kubernetes does for containers, env, ports, volumes).
"""
import copy
from typing import Any


class PatchError(ValueError):
    """The patch cannot be applied to this object (malformed or a bad path): HTTP 422/400."""


class PatchTestFailed(PatchError):
    """A JSON-patch `test` operation did not match: Kubernetes answers 422 Invalid."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: dicts merge recursively, None deletes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Merge patch, except that lists of dicts that all have a `name` merge item by item by name.

    `{"$patch": "delete", "name": x}` in such a list removes item x; `$retainKeys` and the other
    directives are ignored.
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith('$'):
            continue
        old = result.get(key)
        if value is None:
            result.pop(key, None)
        elif _is_named_list(value) and _is_named_list(old):
            result[key] = _merge_named_lists(old, value)
        else:
            result[key] = strategic_merge_patch(old, value)
    return result


def _is_named_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, dict) and 'name' in item for item in value)


def _merge_named_lists(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Kubernetes keeps the order of the existing items and appends the new ones.
    merged = {item['name']: item for item in old}
    for item in new:
        if item.get('$patch') == 'delete':
            merged.pop(item['name'], None)
        else:
            merged[item['name']] = strategic_merge_patch(merged.get(item['name']), item)
    return list(merged.values())


def json_patch(target: Any, operations: list[dict[str, Any]]) -> Any:
    """RFC 6902: add, remove, replace, move, copy, test, applied in order to a copy of target."""
    if not isinstance(operations, list):
        raise PatchError('a JSON patch must be a list of operations')
    doc = copy.deepcopy(target)
    for op in operations:
        doc = _apply_op(doc, op)
    return doc


def _apply_op(doc: Any, op: dict[str, Any]) -> Any:
    kind, path = op.get('op'), op.get('path', '')
    if kind == 'test':
        if _get(doc, _split(path)) != op.get('value'):
            raise PatchTestFailed(f'the test operation failed at {path!r}')
        return doc
    if kind == 'add':
        return _put(doc, _split(path), copy.deepcopy(op.get('value')), insert=True)
    if kind == 'replace':
        _get(doc, _split(path))  # must exist
        return _put(doc, _split(path), copy.deepcopy(op.get('value')), insert=False)
    if kind == 'remove':
        return _remove(doc, _split(path))
    if kind in ('move', 'copy'):
        source = _split(op.get('from', ''))
        value = copy.deepcopy(_get(doc, source))
        if kind == 'move':
            doc = _remove(doc, source)
        return _put(doc, _split(path), value, insert=True)
    raise PatchError(f'unknown JSON patch operation {kind!r}')


def _split(path: str) -> list[str]:
    if path == '':
        return []
    if not path.startswith('/'):
        raise PatchError(f'a JSON pointer must start with "/": {path!r}')
    return [part.replace('~1', '/').replace('~0', '~') for part in path[1:].split('/')]


def _get(doc: Any, parts: list[str]) -> Any:
    for part in parts:
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            raise PatchError(f'the path {"/" + "/".join(parts)!r} does not exist')
    return doc


def _put(doc: Any, parts: list[str], value: Any, insert: bool) -> Any:
    if not parts:
        return value
    parent, last = _get(doc, parts[:-1]), parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        index = len(parent) if last == '-' else _index(last, len(parent) + (1 if insert else 0))
        if insert:
            parent.insert(index, value)
        else:
            parent[index] = value
    else:
        raise PatchError(f'cannot set a child of a scalar at {parts!r}')
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        raise PatchError('cannot remove the whole document')
    parent, last = _get(doc, parts[:-1]), parts[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(last, len(parent))]
    else:
        raise PatchError(f'the path {"/" + "/".join(parts)!r} does not exist')
    return doc


def _index(part: str, size: int) -> int:
    if not part.isdigit() or int(part) >= size:
        raise PatchError(f'bad list index {part!r}')
    return int(part)
