"""The memory policy: freed tensor memory is kept for reuse, not handed back to the OS every step.

glibc's malloc serves a block above its mmap threshold (at most 32 MB by its own sliding rule) with a
fresh mmap and unmaps it when freed, so a tensor of that size costs a page fault per 4 KB page each
time it is allocated again. One run's activations stay below it; K seeds' stacked activations do not
(the 203k-parameter linear-map configuration at K=4: 35 MB a matmul output). Measured on 2 cores,
one thread: vmapped linear forward + backward at K=4 took 154 ms against 112 ms for four separate
runs' layers, and 110 ms once the threshold was raised; the K=4 batched step went from 0.68× to
0.96× of four sequential steps. Raising the thresholds only changes where memory comes from, never
a number the run computes. It changes the whole process, though, so there is an opt-out (a config
key and an environment variable), and every result records the policy in force.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# mallopt's parameter numbers (malloc.h) and the sizes set: blocks up to 1 GiB come from the heap, and
# up to 1 GiB of freed memory at its top stays mapped for the next step.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
KEPT_BYTES = 1 << 30
# The opt-out: it changes the whole process (a notebook that imports the suite, say), so the
# environment can refuse it, whatever a config asks (trainer.keep_freed_memory is the config's say).
ENV_VAR = "EMERGENCE_BENCH_KEEP_FREED_MEMORY"
OFF, ON = ("0", "false", "no", "off"), ("", "1", "true", "yes", "on")
_policy: str | None = None  # what keep_freed_memory did in this process, once decided


def keep_freed_memory(wanted: bool = True) -> str:
    """Raise glibc malloc's mmap and trim thresholds to ``KEPT_BYTES``, unless ``wanted`` is false
    (``trainer.keep_freed_memory``) or the environment variable ``EMERGENCE_BENCH_KEEP_FREED_MEMORY``
    is 0/false/no/off, and say what was done: ``"glibc: freed memory kept up to 1 GiB"``, or why the
    allocator's defaults stay (opted out, not glibc, mallopt refused). Decided once per process, by
    its first call; later calls return the same answer. A bad value of the variable is a ValueError."""
    global _policy
    if _policy is None:
        setting = os.environ.get(ENV_VAR, "").strip().lower()
        if setting not in OFF + ON:
            raise ValueError(f"{ENV_VAR}={os.environ[ENV_VAR]!r}: use 0 (keep the allocator's defaults) or 1")
        if setting in OFF:
            _policy = f"allocator defaults (opted out: {ENV_VAR}={os.environ[ENV_VAR]})"
        elif not wanted:
            _policy = "allocator defaults (opted out: trainer.keep_freed_memory false)"
        else:
            _policy = _set_thresholds()
    return _policy


def policy() -> str:
    """What this process's allocator policy is (for the record), without deciding it."""
    return _policy or "allocator defaults (no run has set a policy in this process)"


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
