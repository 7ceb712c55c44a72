"""Pure label- and field-selector parsing and matching, as the API server reads `?labelSelector=`.

Labels: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` (exists), `!k` (does not exist).
Fields: `path=v`, `path==v`, `path!=v` for any dotted path (metadata.name, metadata.namespace,
status.phase, spec.nodeName, involvedObject.uid...); a missing field compares as "".
A malformed selector raises SelectorError (the emulator answers 400 BadRequest).
"""
import re
from collections.abc import Callable, Mapping
from typing import Any

Predicate = Callable[[dict[str, Any]], bool]

_SET_TERM = re.compile(r'^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$')
_EQ_TERM = re.compile(r'^\s*([^\s!=]+)\s*(==|=|!=)\s*([^\s]*)\s*$')
_EXISTS_TERM = re.compile(r'^\s*(!?)\s*([^\s!=(),]+)\s*$')


class SelectorError(ValueError):
    """The selector string is malformed."""


def _split_terms(selector: str) -> list[str]:
    # Commas split terms, except inside the parentheses of a set term: `k in (a,b),x=y`.
    terms, depth, current = [], 0, ''
    for char in selector:
        depth += {'(': 1, ')': -1}.get(char, 0)
        if char == ',' and depth == 0:
            terms.append(current)
            current = ''
        else:
            current += char
    terms.append(current)
    return [term for term in terms if term.strip()]


def _label_term(term: str) -> Callable[[Mapping[str, str]], bool]:
    if match := _SET_TERM.match(term):
        key, op, raw = match.groups()
        values = {value.strip() for value in raw.split(',') if value.strip()}
        if op == 'in':
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match := _EQ_TERM.match(term):
        key, op, value = match.groups()
        if op == '!=':
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if match := _EXISTS_TERM.match(term):
        negated, key = match.groups()
        return (lambda labels: key not in labels) if negated else (lambda labels: key in labels)
    raise SelectorError(f'unable to parse label selector term {term!r}')


def parse_label_selector(selector: str | None) -> Predicate:
    """A predicate on a whole object that checks its metadata.labels against the selector."""
    terms = [_label_term(term) for term in _split_terms(selector or '')]

    def matches(obj: dict[str, Any]) -> bool:
        labels = (obj.get('metadata') or {}).get('labels') or {}
        return all(term(labels) for term in terms)
    return matches


def field_value(obj: dict[str, Any], path: str) -> str:
    """The string form of a dotted field path; "" when missing (as the API server compares it)."""
    value: Any = obj
    for part in path.split('.'):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ''
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _field_term(term: str) -> Predicate:
    match = _EQ_TERM.match(term)
    if not match:
        raise SelectorError(f'unable to parse field selector term {term!r}')
    path, op, value = match.groups()
    if op == '!=':
        return lambda obj: field_value(obj, path) != value
    return lambda obj: field_value(obj, path) == value


def parse_field_selector(selector: str | None) -> Predicate:
    """A predicate on a whole object for a `?fieldSelector=` string (all terms must hold)."""
    terms = [_field_term(term) for term in _split_terms(selector or '')]
    return lambda obj: all(term(obj) for term in terms)


def format_match_labels(selector: Mapping[str, Any] | None) -> str:
    """A LabelSelector dict ({matchLabels, matchExpressions}) as a selector string, for /scale."""
    selector = selector or {}
    terms = [f'{key}={value}' for key, value in sorted((selector.get('matchLabels') or {}).items())]
    for expr in selector.get('matchExpressions') or []:
        key, op, values = expr['key'], expr['operator'], expr.get('values') or []
        terms.append({
            'In': f'{key} in ({",".join(values)})',
            'NotIn': f'{key} notin ({",".join(values)})',
            'Exists': key,
            'DoesNotExist': f'!{key}',
        }[op])
    return ','.join(terms)
