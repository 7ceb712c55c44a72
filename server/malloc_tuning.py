"""Keep the memory a forward frees for the next forward, where the C library is glibc.

A forward allocates and frees the same activations each time (about 1 GB for the default model at
two requests a batch). glibc's defaults hand much of that back to the kernel: a block over its mmap
threshold is unmapped when freed, a thread's arena deletes a heap that empties, the top of the heap
is trimmed. The next forward then faults every page in again, zeroed. Measured in the server (bf16,
Intel Xeon with AMX, 2 cores, docs/performance.md): 0-230K minor faults per 4 requests, about 0.1 s
per 100K of a 0.47 s forward, so its forwards ran 18-22 items/s where the same forward in one
thread ran 22-23.

The tuning: one arena (the forwards run on a worker thread, whose own arena's heaps were deleted
and created again), every block from the heap (glibc maps any block over 32 MiB afresh however it
is tuned, and a float32 forward of two requests has 48 MiB ones), and no trimming. Once the model is
loaded and warmed, `release_free_memory()` hands back what loading freed (a float32 copy converted
to bfloat16, the GGUF's dequantized buffers), once; from then on the resident set stays at the
serving peak, which is what a pod's memory limit must hold anyway. A user's own choice is left
alone: an allocator preloaded (jemalloc, tcmalloc) or any `glibc.malloc` tunable in GLIBC_TUNABLES.
"""
from __future__ import annotations

import ctypes
from collections.abc import Mapping

# mallopt's parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
M_ARENA_MAX = -8

NEVER_TRIM = 2**31 - 1  # mallopt takes an int
SETTINGS = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, NEVER_TRIM))

_tuned = False  # keep_freed_memory() tuned this process


def users_own_choice(environ: Mapping[str, str]) -> str | None:
    """Why the allocator is the user's to tune (None: it is ours)."""
    if environ.get("LD_PRELOAD"):
        return "LD_PRELOAD is set (an allocator of the user's choice)"
    if "glibc.malloc" in environ.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES sets glibc's malloc"
    return None


def keep_freed_memory(environ: Mapping[str, str]) -> str:
    """Tune glibc's malloc as above, before the process starts its threads; returns the log line
    that says what was done, or why not."""
    reason = users_own_choice(environ)
    if reason is not None:
        return f"malloc left as it is: {reason}"
    libc = _glibc()
    if libc is None:
        return "malloc left as it is: the C library is not glibc"
    refused = [param for param, value in SETTINGS if libc.mallopt(param, value) != 1]
    if refused:
        return f"malloc partly tuned: mallopt refused parameters {refused}"
    global _tuned
    _tuned = True
    return "malloc keeps freed memory for the next forward (one arena, every block from the heap, no trim)"


def release_free_memory() -> None:
    """Hand back to the kernel, once, what the process has freed so far (where it was tuned: an
    untuned glibc trims by itself)."""
    if _tuned:
        _glibc().malloc_trim(0)


def _glibc() -> ctypes.CDLL | None:
    libc = ctypes.CDLL(None)
    return libc if hasattr(libc, "gnu_get_libc_version") else None

