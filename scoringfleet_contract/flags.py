"""A program's flags read from its config dataclass, so each default is written once: in the field.

Every field is a flag: `request_timeout_s` is `--request-timeout` (a unit suffix `_s` is dropped),
its type and default the field's, a Literal's values its choices, a bool a switch (store_true). A
field's metadata adds the rest: `field(default=..., metadata=flag("help text"))`; `flag(None)` keeps a
field off the command line. The server and the gateway both spell their flags this way.
"""
from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any

UNIT_SUFFIXES = ("_s",)


def flag(help: str | None = "", **argparse_kwargs: Any) -> dict[str, Any]:
    """A field's metadata: its help text and any of argparse's add_argument keywords (metavar,
    nargs, ...). `help=None`: not a flag."""
    return {"flag": None if help is None else {"help": help, **argparse_kwargs}}


def flag_name(field_name: str) -> str:
    for suffix in UNIT_SUFFIXES:
        field_name = field_name.removesuffix(suffix)
    return "--" + field_name.replace("_", "-")


def add_flags(parser: argparse.ArgumentParser, config_class: type) -> None:
    """One flag per field of `config_class`, in field order, each storing into the field's name."""
    hints = typing.get_type_hints(config_class)
    for field in dataclasses.fields(config_class):
        spec = field.metadata.get("flag", {})
        if spec is None:
            continue
        name = flag_name(field.name)
        kwargs: dict[str, Any] = {"dest": field.name, "default": _default(field), **spec}
        kwargs["help"] = spec.get("help") or None
        value_type = _value_type(hints[field.name])
        if value_type is bool:
            kwargs["action"] = "store_true"
        elif typing.get_origin(value_type) is typing.Literal:
            kwargs.setdefault("choices", typing.get_args(value_type))
        elif typing.get_origin(value_type) is tuple:
            kwargs.setdefault("nargs", "+")
            kwargs.setdefault("type", typing.get_args(value_type)[0])
        else:
            kwargs.setdefault("type", value_type)
            kwargs.setdefault("metavar", name.removeprefix("--").replace("-", "_").upper())
        parser.add_argument(name, **kwargs)


def config_fields(args: argparse.Namespace, config_class: type) -> dict[str, Any]:
    """The parsed flags as the config's keyword arguments (a list given for a tuple field: a tuple)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(config_class) if hasattr(args, f.name)}
    return {name: tuple(value) if isinstance(value, list) else value for name, value in values.items()}


def _default(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None if field.default is dataclasses.MISSING else field.default


def _value_type(hint: Any) -> Any:
    """`int | None` -> int; anything else as it is."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    return hint
