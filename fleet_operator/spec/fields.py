"""Typed, bounded reads of one object of a ScoringFleet's spec, driven by its node in the CRD schema.

The emulator (and an API server without the schema) lets any JSON through, so a wrong type or an
out-of-range value must become a SpecError naming the field, not a crash in a builder. Defaults,
minimum / maximum / exclusiveMinimum and enums come from the CRD (crd.py); nothing is restated.
Pure: no I/O.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleet_operator.spec.quantity import parse_quantity

_PERCENT = re.compile(r"^[0-9]+%$")


class SpecError(ValueError):
    """The spec cannot be honoured; the message is for the user (it ends up in a condition)."""


def as_object(value: Any, path: str, required: bool = False) -> Mapping[str, Any]:
    if value is None:
        if required:
            raise SpecError(f"{path} is required")
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{path} must be an object, got {type(value).__name__}")
    return value


def list_of_objects(value: Any, path: str) -> tuple[Mapping[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise SpecError(f"{path} must be a list of objects")
    return tuple(value)


def string_map(value: Any, path: str) -> Mapping[str, str]:
    obj = as_object(value, path)
    if not all(isinstance(v, str) for v in obj.values()):
        raise SpecError(f"{path} values must be strings")
    return obj


@dataclass(frozen=True)
class Fields:
    """One object of the spec (`value`), where it is (`path`, for messages) and its schema node."""

    value: Mapping[str, Any]
    path: str
    schema: Mapping[str, Any]

    @classmethod
    def of(cls, value: Any, path: str, schema: Mapping[str, Any], required: bool = False) -> Fields:
        return cls(as_object(value, path, required), path, schema)

    def child(self, key: str) -> Fields:
        """The nested object `key`, with its own schema node."""
        return Fields.of(self.value.get(key), f"{self.path}.{key}", self.schema["properties"][key])

    def _get(self, key: str) -> tuple[Any, Mapping[str, Any]]:
        prop = self.schema["properties"][key]
        return self.value.get(key, prop.get("default")), prop

    def string(self, key: str) -> str | None:
        value, _ = self._get(key)
        if value is not None and not isinstance(value, str):
            raise SpecError(f"{self.path}.{key} must be a string, got {value!r}")
        return value

    def enum(self, key: str) -> str:
        value, prop = self._get(key)
        if value not in prop["enum"]:
            raise SpecError(f"{self.path}.{key} must be one of {', '.join(prop['enum'])}, got {value!r}")
        return value

    def boolean(self, key: str) -> bool:
        value, _ = self._get(key)
        if not isinstance(value, bool):
            raise SpecError(f"{self.path}.{key} must be true or false, got {value!r}")
        return value

    def integer(self, key: str) -> int:
        value, prop = self._get(key)
        if value is None:
            raise SpecError(f"{self.path}.{key} is required")
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{self.path}.{key} must be an integer, got {value!r}")
        self._check_bounds(key, value, value, prop)
        return value

    def optional_integer(self, key: str) -> int | None:
        """An integer the CRD gives no default: None when left out."""
        return None if self.value.get(key) is None else self.integer(key)

    def number(self, key: str) -> float:
        value, prop = self._get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SpecError(f"{self.path}.{key} must be a number, got {value!r}")
        self._check_bounds(key, value, float(value), prop)
        return float(value)

    def _check_bounds(self, key: str, value: Any, as_read: Any, prop: Mapping[str, Any]) -> None:
        low, high = prop.get("minimum"), prop.get("maximum")
        if low is not None and prop.get("exclusiveMinimum") and not as_read > low:
            raise SpecError(f"{self.path}.{key} must be > {low}, got {as_read}")
        if low is not None and value < low:
            raise SpecError(f"{self.path}.{key} must be >= {low}, got {value}")
        if high is not None and value > high:
            raise SpecError(f"{self.path}.{key} must be <= {high}, got {value}")

    def quantity(self, key: str) -> str:
        value, _ = self._get(key)
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise SpecError(f"{self.path}.{key} must be a Kubernetes quantity, got {value!r}")
        try:
            amount = parse_quantity(value)
        except ValueError:
            raise SpecError(f"{self.path}.{key} is not a Kubernetes quantity: {value!r}") from None
        if amount <= 0:
            raise SpecError(f"{self.path}.{key} must be > 0, got {value!r}")
        return str(value)

    def int_or_percent(self, key: str, max_percent: int | None = None) -> int | str:
        """An IntOrString as a Deployment's maxSurge / maxUnavailable takes it: an integer >= 0 or
        a percentage string ("25%"), returned as written."""
        value, _ = self._get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if isinstance(value, str) and _PERCENT.match(value):
            if max_percent is not None and int(value[:-1]) > max_percent:
                raise SpecError(f"{self.path}.{key} must be at most {max_percent}%, got {value!r}")
            return value
        raise SpecError(f"{self.path}.{key} must be an integer >= 0 or a percentage such as "
                        f"'25%', got {value!r}")

    def objects(self, key: str) -> tuple[Mapping[str, Any], ...]:
        return list_of_objects(self.value.get(key), f"{self.path}.{key}")
