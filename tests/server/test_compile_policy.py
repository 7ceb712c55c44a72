"""compile_policy: --compile auto decides by device, dtype, the CPU's flags and a warm cache;
on/off force it; /proc/cpuinfo's flags line is read as the kernel writes it."""
from __future__ import annotations

import pytest

from server.compile_policy import choose_compile, cpu_flags_of

AMX = frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
AVX512_BF16 = frozenset({"avx2", "avx512f", "avx512_bf16"})
AVX2 = frozenset({"avx2", "fma"})

CASES = {
    # mode, device, dtype, cpu flags, warm cache -> compile
    "auto-bf16-amx": ("auto", "cpu", "bfloat16", AMX, False, True),
    "auto-bf16-avx512-bf16": ("auto", "cpu", "bfloat16", AVX512_BF16, False, True),
    "auto-bf16-avx2-emulated": ("auto", "cpu", "bfloat16", AVX2, False, False),
    "auto-float32-amx-cold": ("auto", "cpu", "float32", AMX, False, False),  # minutes for ~12 %
    "auto-float32-avx2-warm": ("auto", "cpu", "float32", AVX2, True, True),  # seconds: take the 12 %
    "auto-cuda-cold": ("auto", "cuda", "bfloat16", frozenset(), False, False),
    "auto-cuda-warm": ("auto", "cuda", "bfloat16", frozenset(), True, True),
    "on-float32-avx2-cold": ("on", "cpu", "float32", AVX2, False, True),
    "off-bf16-amx-warm": ("off", "cpu", "bfloat16", AMX, True, False),
}


@pytest.mark.parametrize("mode, device, dtype, flags, warm, compiles", CASES.values(), ids=CASES.keys())
def test_auto_compiles_where_it_pays_and_on_off_force_it(mode, device, dtype, flags, warm, compiles):
    choice = choose_compile(mode, device, dtype, flags, warm)
    assert choice.compile is compiles
    assert choice.reason.startswith(mode if mode == "auto" else f"--compile {mode}")


def test_the_reason_names_what_decided():
    assert "amx_bf16" in choose_compile("auto", "cpu", "bfloat16", AMX, False).reason
    assert "warm compile cache" in choose_compile("auto", "cpu", "float32", AVX2, True).reason
    assert "no native bfloat16" in choose_compile("auto", "cpu", "bfloat16", AVX2, False).reason


def test_auto_stays_eager_on_a_cpu_without_a_cpp_compiler():
    assert not choose_compile("auto", "cpu", "bfloat16", AMX, True, has_cpp_compiler=False).compile
    assert choose_compile("auto", "cuda", "bfloat16", frozenset(), True, has_cpp_compiler=False).compile
    assert choose_compile("on", "cpu", "bfloat16", AMX, False, has_cpp_compiler=False).compile  # forced


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="compile mode"):
        choose_compile("fast", "cpu", "float32", AVX2, False)


CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile
bugs\t\t: spectre_v1

processor\t: 1
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile
"""


@pytest.mark.parametrize("text, expected", [
    (CPUINFO, frozenset({"fpu", "sse2", "avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})),
    ("processor\t: 0\nFeatures\t: fp asimd\n", frozenset()),  # aarch64 names them Features
    ("", frozenset()),
], ids=["x86", "arm", "empty"])
def test_cpu_flags_are_read_from_the_first_flags_line(text, expected):
    assert cpu_flags_of(text) == expected
