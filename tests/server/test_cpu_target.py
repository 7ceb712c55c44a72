"""cpu_target: the -march inductor builds for, from /proc/cpuinfo's flags: a named x86-64 level
(with bfloat16 conversions where a v4 CPU has them), so that a cache built on one CPU of a level
runs on every other of that level; None off x86-64."""
from __future__ import annotations

import platform

import pytest

from server.compile_policy import cpu_flags_of
from server.cpu_target import inductor_extensions, inductor_march, x86_64_level

V2 = {"lm", "sse2", "cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}
V3 = V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
V4 = V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}

CPUS = {
    # flags -> march
    "zen 3 (AVX2)": (V3 | {"sha_ni", "vaes"}, "x86-64-v3"),
    "ice lake (AVX-512, no bf16)": (V4 | {"avx512_vnni", "avx512vbmi"}, "x86-64-v4"),
    "zen 5 (AVX-512 bf16)": (V4 | {"avx512_bf16", "avx512_vp2intersect"}, "x86-64-v4 -mavx512bf16"),
    "sapphire rapids (AMX)": (V4 | {"avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16"},
                              "x86-64-v4 -mavx512bf16"),
    "an old vm (no movbe)": ((V3 - {"movbe"}) | {"avx512f"}, "x86-64-v2"),
    "sse2 only": ({"lm", "sse2"}, "x86-64"),
    "bf16 without a full v4 (a vm that hides avx512cd)": (V4 - {"avx512cd"} | {"avx512_bf16"}, "x86-64-v3"),
}


@pytest.mark.parametrize("name", CPUS)
def test_the_march_is_the_highest_level_the_cpu_has_in_full(name):
    flags, march = CPUS[name]
    assert inductor_march(frozenset(flags)) == march


def test_off_x86_64_inductor_keeps_its_own_choice():
    assert inductor_march(frozenset()) is None  # no /proc/cpuinfo
    assert inductor_march(frozenset({"fp", "asimd", "sve", "bf16"})) is None  # an aarch64 server
    assert x86_64_level(frozenset({"sse2", "avx2"})) is None  # not long mode: a 32-bit CPU


@pytest.mark.skipif(platform.machine() != "x86_64", reason="reads an x86-64 /proc/cpuinfo")
def test_this_machine_has_a_level():
    """Every CPU these tests run on is x86-64 (read as the server reads it)."""
    with open("/proc/cpuinfo") as cpuinfo:
        flags = cpu_flags_of(cpuinfo.read())
    assert x86_64_level(flags) in ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")


def test_the_extensions_inductor_adds_by_itself_are_named_for_the_key():
    skylake, ice_lake = frozenset(V4), frozenset(V4 | {"avx512_vnni"})
    assert inductor_march(skylake) == inductor_march(ice_lake)  # one level...
    assert inductor_extensions(skylake) == () and inductor_extensions(ice_lake) == ("avx512_vnni",)  # ...told apart
    assert inductor_extensions(frozenset(CPUS["sapphire rapids (AMX)"][0])) == ("amx_tile", "amx_bf16")
