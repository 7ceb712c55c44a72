"""--compile auto|on|off: whether the server compiles its items forward, and why. Pure: the
processor's flags and whether a warm compile cache exists are read by the caller
(compile_start.py).

`auto` (the default) compiles where it pays for its warm-up: a CPU with native bfloat16 matmuls
(AMX or AVX-512 bf16) in bfloat16, where the compiled items forward measured 1.5-1.9x the eager
one with AMX and 1.4x with AVX-512 bf16 alone (AMD Zen 5, both forwards through our attention
kernel: 14.2 against 10.2 items/s; docs/performance.md), and wherever a warm compile cache for this
model, dtype and processor is already on disk (the warm-up then takes seconds: a start ~4 s longer than an
eager one on Zen 5, 12.1 against 8.2 s, and even float32 gains ~12 %). Elsewhere (float32 on a cold cache,
CUDA) it stays eager: a cold compile (~19 s more than an eager start on Zen 5 in bf16, more on a busy
node) for a gain not measured to repay it. `on` and `off` force it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CompileMode = Literal["auto", "on", "off"]
COMPILE_MODES: tuple[str, ...] = ("auto", "on", "off")
# /proc/cpuinfo flags of a CPU whose bfloat16 matmuls run natively (oneDNN's AMX or AVX-512 bf16
# kernels), where compiling (fusion, prepacked weights) pays most.
FAST_BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")


@dataclass(frozen=True)
class CompileChoice:
    """Whether to compile, and the one-line reason the log and /get_server_info give."""

    compile: bool
    reason: str


def choose_compile(mode: str, device_type: str, dtype: str, cpu_flags: frozenset[str],
                   has_warm_cache: bool, has_cpp_compiler: bool = True) -> CompileChoice:
    """The decision for a resolved device ("cpu", "cuda") and dtype ("bfloat16", ...);
    `has_cpp_compiler`: inductor finds the C++ compiler its CPU kernels are built with."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile mode must be one of {COMPILE_MODES}, got {mode!r}")
    if mode != "auto":
        return CompileChoice(mode == "on", f"--compile {mode}")
    if device_type == "cpu" and not has_cpp_compiler:
        return CompileChoice(False, "auto: eager, no C++ compiler for inductor's CPU kernels "
                                    "(install g++, or set CXX)")
    if has_warm_cache:
        return CompileChoice(True, "auto: a warm compile cache for this model, dtype and processor")
    if device_type != "cpu":
        return CompileChoice(False, f"auto: eager on {device_type} (not measured to repay a cold "
                                    "compile; --compile on to force)")
    fast = [flag for flag in FAST_BF16_CPU_FLAGS if flag in cpu_flags]
    if dtype == "bfloat16" and fast:
        return CompileChoice(True, f"auto: bfloat16 on a CPU with {' and '.join(fast)}")
    if dtype == "bfloat16":
        return CompileChoice(False, "auto: eager, this CPU has no native bfloat16 matmul "
                                    f"({' or '.join(FAST_BF16_CPU_FLAGS)})")
    return CompileChoice(False, f"auto: eager in {dtype} on a cold compile cache (a cold compile "
                                "costs its start tens of seconds for a gain measured only in bf16; "
                                "--compile on to force)")


def cpu_flags_of(cpuinfo: str) -> frozenset[str]:
    """The feature flags of /proc/cpuinfo's text (its first `flags` line: every core lists the
    same); empty where it has none (not x86, or no /proc)."""
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return frozenset(value.split())
    return frozenset()
