"""What the GPU run needs before it spends any time: Python, torch (with CUDA unless a dry run),
the server's and the load generator's packages at the versions pyproject.toml asks for. Returns
what is missing, in words, with what to install; imports nothing heavy itself except torch.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import shutil
import sys

MIN_PYTHON = (3, 11)
# import name -> (distribution, lowest version the project supports, who needs it)
PACKAGES = {
    "torch": ("torch", (2, 4), "the model"),
    "transformers": ("transformers", (5, 24), "the model (the `cache=` forward argument)"),
    "tokenizers": ("tokenizers", (0, 0), "the tokenizer"),
    "safetensors": ("safetensors", (0, 0), "saving the random-init model"),
    "fastapi": ("fastapi", (0, 115), "the server"),
    "uvicorn": ("uvicorn", (0, 30), "the server"),
    "pydantic": ("pydantic", (2, 7), "the server"),
    "prometheus_client": ("prometheus-client", (0, 20), "the server's /metrics"),
    "aiohttp": ("aiohttp", (3, 9), "the load generator"),
}


def version_tuple(text: str) -> tuple[int, ...]:
    """'5.17.0.dev0' -> (5, 17, 0): the leading numeric parts."""
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


def missing_packages() -> list[str]:
    problems = []
    for module, (dist, lowest, needed_by) in PACKAGES.items():
        wanted = ".".join(map(str, lowest))
        if importlib.util.find_spec(module) is None:
            problems.append(f"{dist} is not installed (needed by {needed_by}): "
                            f"pip install '{dist}>={wanted}'")
            continue
        found = importlib.metadata.version(dist)
        if version_tuple(found) < lowest:
            problems.append(f"{dist} {found} is older than {wanted} (needed by {needed_by}): "
                            f"pip install '{dist}>={wanted}'")
    return problems


def cuda_problems() -> list[str]:
    import torch

    if torch.version.cuda is None:
        return [f"torch {torch.__version__} is a CPU-only build: install a CUDA build of torch"]
    if not torch.cuda.is_available():
        return [f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"]
    return []


def check_environment(need_cuda: bool) -> list[str]:
    """Every problem found (empty: ready). CUDA is checked only when torch is importable."""
    problems = []
    if sys.version_info < MIN_PYTHON:
        problems.append(f"Python {sys.version.split()[0]} is older than "
                        f"{'.'.join(map(str, MIN_PYTHON))}")
    problems += missing_packages()
    if need_cuda and importlib.util.find_spec("torch") is not None:
        problems += cuda_problems()
    return problems


def describe() -> str:
    """One line on what was found, for the report."""
    import torch

    device = (torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device")
    smi = "nvidia-smi found" if shutil.which("nvidia-smi") else "no nvidia-smi (no GPU memory)"
    return (f"Python {sys.version.split()[0]}, torch {torch.__version__} (CUDA "
            f"{torch.version.cuda}), transformers {importlib.metadata.version('transformers')}, "
            f"{device}, {smi}")
