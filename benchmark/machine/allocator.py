"""The memory policy: freed tensor memory is kept for reuse, not handed back to the OS every step.

glibc's malloc serves a block above its mmap threshold (at most 32 MB by its own sliding rule) with a
fresh mmap and unmaps it when freed, so a tensor of that size costs a page fault per 4 KB page each
time it is allocated again. One run's activations stay below it; K seeds' stacked activations do not
(the 203k-parameter linear-map configuration at K=4: 35 MB a matmul output). Measured on 2 cores,
one thread: vmapped linear forward + backward at K=4 took 154 ms against 112 ms for four separate
runs' layers, and 110 ms once the threshold was raised; the K=4 ensemble step went from 0.68× to
0.96× of four sequential steps. Raising the thresholds only changes where memory comes from, never
a number the run computes.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt's parameter numbers (malloc.h) and the sizes set: blocks up to 1 GiB come from the heap, and
# up to 1 GiB of freed memory at its top stays mapped for the next step.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
KEPT_BYTES = 1 << 30
_policy: str | None = None  # what keep_freed_memory did in this process, once decided


def keep_freed_memory() -> str:
    """Raise glibc malloc's mmap and trim thresholds to ``KEPT_BYTES`` (once per process) and say
    what was done: ``"glibc: freed memory kept up to 1 GiB"``, or why nothing was (not glibc, or
    mallopt refused), in which case the allocator's defaults stay."""
    global _policy
    if _policy is None:
        _policy = _set_thresholds()
    return _policy


def _set_thresholds() -> str:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # only glibc has it, and only glibc's thresholds are these
    except (OSError, AttributeError, TypeError):
        return f"allocator defaults (no glibc mallopt in {name or 'this C library'})"
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if not (mallopt(M_MMAP_THRESHOLD, KEPT_BYTES) and mallopt(M_TRIM_THRESHOLD, KEPT_BYTES)):
        return "allocator defaults (mallopt refused the thresholds)"
    return f"glibc: freed memory kept up to {KEPT_BYTES >> 30} GiB"
