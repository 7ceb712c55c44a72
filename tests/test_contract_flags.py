"""scoringfleet_contract.flags: a config dataclass's fields as argparse flags, tabled on a small one."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Literal

import pytest

from scoringfleet_contract.flags import add_flags, config_fields, flag, flag_name


@dataclass(frozen=True)
class Example:
    urls: tuple[str, ...] = field(default=(), metadata=flag("where", metavar="URL"))
    name: str | None = None
    count: int = field(default=3, metadata=flag("how many"))
    timeout_s: float = 1.5
    mode: Literal["a", "b"] = "a"
    verbose: bool = False
    derived: int = field(default=0, metadata=flag(None))  # not a flag


def parse(argv: list[str]) -> Example:
    parser = argparse.ArgumentParser()
    add_flags(parser, Example)
    return Example(**config_fields(parser.parse_args(argv), Example))


@pytest.mark.parametrize(("argv", "expected"), [
    ([], Example()),
    (["--urls", "x", "y"], Example(urls=("x", "y"))),
    (["--name", "n", "--count", "7"], Example(name="n", count=7)),
    (["--timeout", "0.5"], Example(timeout_s=0.5)),  # the unit suffix is not in the flag
    (["--mode", "b", "--verbose"], Example(mode="b", verbose=True)),
], ids=["defaults", "tuple", "str-and-int", "seconds", "choice-and-switch"])
def test_flags_parse_into_the_config(argv, expected):
    assert parse(argv) == expected


@pytest.mark.parametrize("argv", [["--mode", "c"], ["--count", "x"], ["--derived", "1"]],
                         ids=["not-a-choice", "not-an-int", "not-a-flag"])
def test_a_bad_flag_is_a_usage_error(argv):
    with pytest.raises(SystemExit) as exited:
        parse(argv)
    assert exited.value.code == 2


def test_help_says_the_fields_help():
    parser = argparse.ArgumentParser()
    add_flags(parser, Example)
    text = parser.format_help()
    assert "--urls URL [URL ...]" in text and "how many" in text and "--derived" not in text


@pytest.mark.parametrize(("name", "expected"), [
    ("request_timeout_s", "--request-timeout"), ("max_request_bytes", "--max-request-bytes"), ("api_key", "--api-key"),
])
def test_flag_name(name, expected):
    assert flag_name(name) == expected
