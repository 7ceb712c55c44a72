"""The processor inductor builds the compiled forward's C++ kernels for: a named x86-64 level and the
one extension its bfloat16 kernels use, in place of its default `-march=native`. Pure: the caller
reads /proc/cpuinfo's flags (compile_start.py).

Why not native: the compile cache is shared by every pod on a volume, and an image can carry one,
so a kernel built on one CPU runs on others. `-march=native` on an AMD Zen 5 emits instructions an
Intel Ice Lake lacks although torch calls both "AVX512": a cache keyed by torch's name alone would
crash the second with an illegal instruction. A named level is the contract the key can state.
Measured on Zen 5 (docs/performance.md): x86-64-v4 with -mavx512bf16 is as fast as native
(14.3 against 13.6 items/s); without -mavx512bf16 it is 15 % slower (bfloat16 rounding emulated).
inductor adds its own ISA flags (AVX-512 VNNI, AMX tiles) by what it detects, on top of this:
`inductor_extensions()` names them for the key.
"""
from __future__ import annotations

# /proc/cpuinfo's names for what each x86-64 micro-architecture level adds (the psABI's table;
# LZCNT is "abm", SSE3 "pni").
X86_64_LEVELS: tuple[tuple[str, frozenset[str]], ...] = (
    ("x86-64-v2", frozenset({"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"})),
    ("x86-64-v3", frozenset({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"})),
    ("x86-64-v4", frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"})),
)
BASELINE = "x86-64"  # every x86-64 CPU: SSE2
BF16_EXTENSION = ("avx512_bf16", "-mavx512bf16")  # the flag, and gcc's option for it
# What inductor adds to -march by itself, by what it detects (its cpu_vec_isa: VecAVX512VNNI, VecAMX
# and AMX fp16): a cache key names them, since a level alone does not imply them.
INDUCTOR_OWN_EXTENSIONS = ("avx512_vnni", "amx_tile", "amx_bf16", "amx_fp16")


def x86_64_level(cpu_flags: frozenset[str]) -> str | None:
    """The highest level every feature of which (and of the levels below) the CPU has; None where
    the flags are not an x86-64 CPU's (another architecture, or no /proc/cpuinfo)."""
    if "lm" not in cpu_flags or "sse2" not in cpu_flags:
        return None
    level = BASELINE
    for name, features in X86_64_LEVELS:
        if not features <= cpu_flags:
            break
        level = name
    return level


def inductor_march(cpu_flags: frozenset[str]) -> str | None:
    """The value for inductor's `cpp.march` (it writes `-march=<value>` into each compile): the
    level, with -mavx512bf16 where a v4 CPU has it; None (inductor's own choice) off x86-64."""
    level = x86_64_level(cpu_flags)
    if level is None:
        return None
    flag, option = BF16_EXTENSION
    if level == "x86-64-v4" and flag in cpu_flags:
        return f"{level} {option}"  # inductor's command line is split by the shell's rules
    return level


def inductor_extensions(cpu_flags: frozenset[str]) -> tuple[str, ...]:
    """Those of INDUCTOR_OWN_EXTENSIONS the CPU has: with the march, what the kernels may use."""
    return tuple(flag for flag in INDUCTOR_OWN_EXTENSIONS if flag in cpu_flags)
