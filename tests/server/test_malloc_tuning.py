"""glibc's malloc tuned to keep freed memory: what a forward frees on its thread, the next one
reuses without faulting its pages in again. Each real check runs in a fresh interpreter, since the
tuning is process-wide."""
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from server.malloc_tuning import keep_freed_memory, users_own_choice

# A worker thread allocates, touches and frees blocks as a forward's activations do: the first
# 16 MiB block faults its 4,096 pages in; what the later blocks fault is what freeing gave back.
PROBE = textwrap.dedent("""
    import ctypes, os, resource, sys, threading
    from server.malloc_tuning import keep_freed_memory
    if sys.argv[1] == "tuned":
        print(keep_freed_memory({}), file=sys.stderr)
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    faults = []
    def forwards():
        for size in (16 << 20, 16 << 20, 8 << 20, 16 << 20):
            before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            block = libc.malloc(size)
            ctypes.memset(block, 1, size)
            libc.free(block)
            faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
    thread = threading.Thread(target=forwards)
    thread.start()
    thread.join()
    print(*faults)
""")

REPO = Path(__file__).resolve().parents[2]
glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc")


def faults_per_block(mode: str) -> list[int]:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    if mode == "tuned":
        assert done.stderr.startswith("malloc keeps freed memory"), done.stderr
    return [int(count) for count in done.stdout.split()]


@glibc_only
def test_tuned_the_blocks_after_the_first_reuse_its_pages():
    first, *later = faults_per_block("tuned")
    assert first >= 4000  # 16 MiB of 4 KiB pages: the probe measures what it should
    assert max(later) < 64


@glibc_only
def test_untuned_glibc_maps_a_freed_block_afresh():
    """Why the tuning exists: glibc's default gives the second block's pages back and faults
    them in again."""
    first, second, *_ = faults_per_block("plain")
    assert second >= 4000


@pytest.mark.parametrize("environ, expected", [
    pytest.param({}, None, id="nothing-set"),
    pytest.param({"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}, "LD_PRELOAD", id="preloaded-allocator"),
    pytest.param({"GLIBC_TUNABLES": "glibc.malloc.arena_max=4"}, "GLIBC_TUNABLES", id="users-tunables"),
    pytest.param({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}, None, id="other-tunables"),
    pytest.param({"LD_PRELOAD": ""}, None, id="empty-preload"),
])
def test_the_users_own_allocator_choice_is_left_alone(environ, expected):
    reason = users_own_choice(environ)
    assert (reason is None) == (expected is None)
    if expected is not None:
        assert expected in reason


def test_a_users_choice_is_said_in_the_log_line():
    line = keep_freed_memory({"LD_PRELOAD": "/usr/lib/libtcmalloc.so"})
    assert line.startswith("malloc left as it is: LD_PRELOAD")
