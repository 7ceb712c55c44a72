"""Our own joined attention for bfloat16 on CPUs with AMX (server/kernels/joined_attention.cpp):
built with the C++ compiler inductor uses, kept beside inductor's kernels (the compile cache's
folder on a fleet, so a warm start loads it in milliseconds), loaded as the op
`torch.ops.scoringfleet_kernels.joined_attention`.

torch's CPU flash kernel runs bfloat16 on AVX-512 dot products, not on AMX tiles; this one runs
both of the attention's products on AMX (docs/performance.md: 2.5-2.9 ms against 3.8-4.4 for 11 rows of
180 tokens over a 120-token prefix, one layer). Faults are contained: where the CPU has no AMX, where
there is no compiler or the build fails, `load_joined_attention()` says why and the cascade keeps
torch's kernel.
"""
from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("kernels") / "joined_attention.cpp"
# The kernel's vector code is written for AVX-512 (at::vec's 16-float vectors) and its products for
# AMX; it is built only where torch itself runs its AVX-512 kernels.
ISA_FLAGS = ("-DCPU_CAPABILITY=AVX512", "-DCPU_CAPABILITY_AVX512", "-mavx512f", "-mavx512bw", "-mavx512vl",
             "-mavx512dq", "-mfma")
BUILD_TIMEOUT_S = 600


def build_flags(compiler: str) -> list[str]:
    """The compiler and its flags for a shared library against this torch, as torch's extensions
    are built (the source and the output file go before them)."""
    from torch.utils.cpp_extension import include_paths, library_paths

    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [compiler, "-shared", "-fPIC", "-O3", "-std=c++17", "-fopenmp", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
            *ISA_FLAGS, *(f"-I{path}" for path in include_paths()), *(f"-L{path}" for path in library_paths()),
            "-lc10", "-ltorch_cpu"]


def library_name(source_text: str, command_flags: list[str]) -> str:
    """The built library's file name: a new source, torch or set of flags is a new file."""
    digest = hashlib.sha256("\0".join([source_text, torch.__version__, *command_flags]).encode()).hexdigest()
    return f"joined_attention-{digest[:16]}.so"


def kernels_folder() -> Path:
    """Beside inductor's kernels: the compile cache's folder where one is active (its env var)."""
    root = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "torchinductor_kernels")
    return Path(root) / "scoringfleet_kernels"


def build(folder: Path, compiler: str) -> Path:
    """The library for this source and torch in `folder`, built there first if absent (written
    under a name of its own and renamed, so a start beside it, in this pod or another sharing the
    folder, never loads half a file)."""
    compiler, *flags = build_flags(compiler)
    library = folder / library_name(SOURCE.read_text(), [compiler, *flags])
    if library.exists():
        return library
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{library.name}.{uuid.uuid4().hex}.partial"  # pods share the folder, and pids
    done = subprocess.run([compiler, str(SOURCE), "-o", str(partial), *flags], capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"{compiler} failed: {done.stderr.strip()[-2000:]}")
    os.replace(partial, library)
    return library


@functools.cache
def load_joined_attention() -> tuple[Callable | None, str]:
    """(the op, why) or (None, why not); once a process (a library registers its op once)."""
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        return None, f"torch runs {torch.backends.cpu.get_cpu_capability()} kernels here, not AVX512"
    if not has_amx_tiles():  # AVX-512 without AMX (AMD Zen 4, Xeons before Sapphire Rapids): no build
        return None, "this CPU has no AMX tiles"
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        library = build(kernels_folder(), get_cpp_compiler())
        torch.ops.load_library(str(library))
    except Exception as error:  # noqa: BLE001 - no compiler (inductor's own error type), a failed build or load
        return None, f"not built: {error}"
    if not torch.ops.scoringfleet_kernels.amx_bfloat16():  # the tiles are there, the OS may not grant them
        return None, "this CPU has no AMX tiles for bfloat16"
    return torch.ops.scoringfleet_kernels.joined_attention, f"loaded from {library}"


def has_amx_tiles() -> bool:
    """Whether the CPU has AMX tiles, as torch's own kernels ask (cpuinfo); True where this torch
    cannot say, so that the built kernel's own check decides."""
    supported = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return True if supported is None else bool(supported())
