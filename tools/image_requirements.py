"""The requirements an image installs, read from pyproject.toml's runtime dependencies.

`python image_requirements.py PYPROJECT` prints them all (the server image); `--control` prints
only what the operator and the gateway import (the control image: no torch, no transformers).
The Dockerfile runs it in its dependency stages, so the versions are written once, in
pyproject.toml; tests/packaging/test_image_requirements.py checks CONTROL against the imports of
fleet_operator/ and gateway/. Standard library only: it runs in the bare base image.
"""
from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

# The distributions fleet_operator/ and gateway/ import at run time (urllib3 comes with kubernetes;
# matplotlib, imported lazily by fleet_operator.replay, is the optional `replay` extra).
CONTROL = ("kopf", "kubernetes", "aiohttp", "prometheus-client", "pyyaml")

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def normalized(name: str) -> str:
    """PEP 503's normal form: PyYAML, pyyaml and py_yaml are one project."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = _NAME.match(requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return normalized(match.group(1))


def runtime_requirements(pyproject: dict) -> list[str]:
    return list(pyproject["project"]["dependencies"])


def select(requirements: list[str], wanted: tuple[str, ...]) -> list[str]:
    """The requirements of the wanted projects, in pyproject's order; each must be there."""
    by_name = {requirement_name(r): r for r in requirements}
    missing = [name for name in wanted if normalized(name) not in by_name]
    if missing:
        raise ValueError(f"not among pyproject.toml's dependencies: {', '.join(missing)}")
    keep = {normalized(name) for name in wanted}
    return [r for r in requirements if requirement_name(r) in keep]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pyproject", type=Path)
    parser.add_argument("--control", action="store_true",
                        help="only what the operator and the gateway import")
    args = parser.parse_args(argv)
    requirements = runtime_requirements(tomllib.loads(args.pyproject.read_text()))
    if args.control:
        try:
            requirements = select(requirements, CONTROL)
        except ValueError as error:
            print(f"image_requirements: {error}", file=sys.stderr)
            return 1
    print("\n".join(requirements))
    return 0


if __name__ == "__main__":
    sys.exit(main())
