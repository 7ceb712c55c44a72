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

# A worker thread allocates, touches and frees blocks as a forward's activations do (48 MiB: over
# the 32 MiB that glibc always maps afresh untuned); it prints the pages each block faulted in, then
# the resident set (MiB) after the last free and after release_free_memory().
PROBE = textwrap.dedent("""
    import ctypes, resource, sys, threading
    from server.malloc_tuning import keep_freed_memory, release_free_memory
    if sys.argv[1] == "tuned":
        print(keep_freed_memory({}), file=sys.stderr)
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    def rss_mib():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) // 1024
    faults = []
    def forwards():
        for size in (16 << 20, 16 << 20, 48 << 20, 48 << 20):
            before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            block = libc.malloc(size)
            ctypes.memset(block, 1, size)
            libc.free(block)
            faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
    thread = threading.Thread(target=forwards)
    thread.start()
    thread.join()
    kept = rss_mib()
    release_free_memory()
    print(*faults, kept, rss_mib())
""")

REPO = Path(__file__).resolve().parents[2]
PAGES_16_MIB = 4096
glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc")


def run_probe(mode: str) -> tuple[list[int], int, int]:
    """(pages faulted per block, resident MiB after the frees, resident MiB after the release)"""
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    if mode == "tuned":
        assert done.stderr.startswith("malloc keeps freed memory"), done.stderr
    *faults, kept, released = (int(field) for field in done.stdout.split())
    return faults, kept, released


@glibc_only
def test_tuned_a_block_freed_is_reused_without_faulting_its_pages_in_again():
    (first, second, first_large, second_large), _, _ = run_probe("tuned")
    assert first >= PAGES_16_MIB - 64  # the probe measures what it should
    assert first_large >= 2 * PAGES_16_MIB - 64  # the heap grew by the difference
    assert second < 64 and second_large < 64


@glibc_only
def test_untuned_glibc_maps_a_freed_block_afresh():
    """Why the tuning exists: glibc's defaults give a freed block's pages back and fault them in
    again, and always so over 32 MiB."""
    (_, second, _, second_large), _, _ = run_probe("plain")
    assert second >= PAGES_16_MIB - 64
    assert second_large >= 3 * PAGES_16_MIB - 64


@glibc_only
def test_tuned_what_was_freed_stays_resident_until_released_once():
    _, kept, released = run_probe("tuned")
    assert kept - released >= 40  # the 48 MiB block, kept free in the heap, then handed back


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
