"""Our own joined attention for bfloat16 on CPUs with bfloat16 dot products, AMX tiles or AVX-512
bf16 (server/kernels/joined_attention.cpp): built with the C++ compiler inductor uses, kept beside
inductor's kernels (the compile cache's folder on a fleet, so a warm start loads it in
milliseconds), loaded as the op `torch.ops.scoringfleet_kernels.joined_attention`.

torch's CPU flash kernel runs bfloat16 through small gemm calls per 32-query block; this one runs
both of the attention's products through oneDNN's brgemm over keys and values packed once, on AMX
tiles where the CPU has them, else on AVX-512 bf16 dot products (docs/performance.md, one layer of
11 rows of 180 tokens over a 120-token prefix: 2.5-2.9 ms against 3.8-4.4 on a Xeon with AMX, 4.1
against 12.7 on an AMD Zen 4). Faults are contained: where the CPU has neither, where there is no
compiler or the build fails, or where the built op does not compute a probe right,
`load_joined_attention()` says why and the cascade keeps torch's kernel.
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
import torch.nn.functional as F

SOURCE = Path(__file__).with_name("kernels") / "joined_attention.cpp"
# The kernel's vector code is written for AVX-512 with bf16 (at::vec's 16-float vectors, intrinsics
# and bf16 conversions); it is loaded only where torch runs its AVX-512 kernels and the CPU has bf16.
ISA_FLAGS = ("-DCPU_CAPABILITY=AVX512", "-DCPU_CAPABILITY_AVX512", "-mavx512f", "-mavx512bw", "-mavx512vl",
             "-mavx512dq", "-mavx512bf16", "-mfma")
BUILD_TIMEOUT_S = 600
# Where an image keeps the library it built (`python -m server.attention_kernel`, the Dockerfile),
# read before any folder of build(): a pod of that image then builds nothing (~8 s on 2 cores).
PREBUILT = SOURCE.parent / "prebuilt"
PROBE_TOLERANCE = 0.05  # bfloat16's own error on the probe's values is ~1e-2


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
    """The library for this source and torch: PREBUILT's, else `folder`'s, built there first if
    absent (written under a name of its own and renamed, so a start beside it, in this pod or
    another sharing the folder, never loads half a file)."""
    compiler, *flags = build_flags(compiler)
    name = library_name(SOURCE.read_text(), [compiler, *flags])
    for built in (PREBUILT / name, folder / name):
        if built.exists():
            return built
    library = folder / name
    folder.mkdir(parents=True, exist_ok=True)
    if not os.access(folder, os.W_OK):  # a read-only volume: say so, not the compiler's own failure
        raise PermissionError(f"cannot write the kernel's library in {folder}")
    partial = folder / f".{library.name}.{uuid.uuid4().hex}.partial"  # pods share the folder, and pids
    done = subprocess.run([compiler, str(SOURCE), "-o", str(partial), *flags], capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"{compiler} failed: {done.stderr.strip()[-2000:]}")
    os.replace(partial, library)
    return library


@functools.cache
def load_joined_attention(folder: Path | None = None) -> tuple[Callable | None, str]:
    """(the op, why) or (None, why not), the library built in `folder` (None: kernels_folder());
    once a process: a library registers its op once, so a later call with another folder gets the
    op already loaded."""
    if torch.backends.cpu.get_cpu_capability() != "AVX512":
        return None, f"torch runs {torch.backends.cpu.get_cpu_capability()} kernels here, not AVX512"
    products = bf16_products()
    if products is None:  # e.g. Skylake and Ice Lake Xeons: AVX-512 without bf16, no build
        return None, "this CPU has no AVX-512 bf16, which the kernel needs"
    from torch._inductor.cpp_builder import get_cpp_compiler

    op = _loaded_op()
    if op is not None:
        library = "this process's library"
    else:
        try:
            library = _build_where_writable(folder, get_cpp_compiler())
            torch.ops.load_library(str(library))
        except Exception as error:  # noqa: BLE001 - no compiler (inductor's own error type), a failed build or load
            return None, f"not built: {error}"
        op = torch.ops.scoringfleet_kernels.joined_attention
    refusal = probe(op)
    if refusal is not None:
        return None, refusal
    return op, f"on {products}, loaded from {library}"


def _loaded_op() -> Callable | None:
    """Our op, where a library of ours is already loaded in this process."""
    try:
        return torch.ops.scoringfleet_kernels.joined_attention
    except (AttributeError, RuntimeError):  # no such namespace or op yet
        return None


def _build_where_writable(folder: Path | None, compiler: str) -> Path:
    """build() in `folder`, else (None, or a read-only volume that lacks the library) in
    kernels_folder()."""
    if folder is not None:
        try:
            return build(folder, compiler)
        except OSError:
            pass
    return build(kernels_folder(), compiler)


def bf16_products() -> str | None:
    """What runs the kernel's bfloat16 products here (oneDNN's brgemm picks): AMX tiles, else
    AVX-512 bf16 dot products; None without AVX-512 bf16, which the kernel's conversions take
    (every CPU with AMX has it; torch's CPU info)."""
    if not torch.cpu._is_avx512_bf16_supported():
        return None
    return "AMX tiles" if torch.cpu._is_amx_tile_supported() else "AVX-512 bf16 dot products"


def probe(op: Callable) -> str | None:
    """None if `op` computes a small joined attention here as a float32 reference does; else why
    not (the CPU's flags said yes, yet oneDNN may refuse the products: an OS that grants no AMX)."""
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(2, 2, 5, 64, generator=generator)  # 2 rows, 2 heads over 1 kv head, 5 tokens
    key, value = (torch.randn(2, 1, 5, 64, generator=generator) for _ in range(2))
    prefix_keys, prefix_values = (torch.randn(1, 1, 3, 64, generator=generator) for _ in range(2))
    try:
        got = op(*(t.bfloat16() for t in (query, key, value, prefix_keys, prefix_values)), 64 ** -0.5, False)
    except RuntimeError as error:
        return f"refused on this CPU: {' '.join(str(error).split())[:300]}"
    keys = torch.cat([prefix_keys.expand(2, -1, -1, -1), key], 2)
    values = torch.cat([prefix_values.expand(2, -1, -1, -1), value], 2)
    sees = torch.ones(5, 8, dtype=torch.bool).tril(3)  # the whole prefix, then its own keys causally
    expected = F.scaled_dot_product_attention(query, keys, values, attn_mask=sees, enable_gqa=True).transpose(1, 2)
    error = float((got.float() - expected).abs().max())
    return None if error <= PROBE_TOLERANCE else f"computes wrong on this CPU (off by {error:.2g})"


def main() -> int:
    """`python -m server.attention_kernel`: build the library into PREBUILT (an image build; no
    AVX-512 needed to build it). A build that fails says so and exits 0: the server builds at start."""
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        print(f"built {build(PREBUILT, get_cpp_compiler())}")
    except Exception as error:  # noqa: BLE001 - no compiler, another architecture: not this image's fault
        print(f"not built ({' '.join(str(error).split())[:300]}); the server builds it at start")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
