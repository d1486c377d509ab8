"""The thread policy: how many torch intra-op threads a run uses (``trainer.threads``).

PyTorch's intra-op threads oversubscribe as soon as anything else runs on the machine, so small
runs default to one thread; see ``choose_threads``. Sweep workers and Ray tasks set the share of
cores their runs may use (``set_cpu_share``); ``emergence_bench.engine.run.apply_threads`` applies the
choice at the start of every run and the row records it.
"""

from __future__ import annotations

import os
from typing import Literal

from emergence_bench.config import ConfigError, check_threads

# PyTorch's intra-op threads oversubscribe as soon as anything else runs on the machine: each op waits
# at a barrier for its slowest thread, and a thread sharing a core with another process waits for a
# scheduler slice, a fixed cost per op (~0.1-0.25 s per step measured here). On 2 cores the `quick`
# model (51k parameters, 0.9 GFLOP a step) ran 61 steps/s with 2 threads and 38 with 1 when idle, but
# < 4 with 2 threads and 19 with 1 beside one busy-loop process; at d_model 256 (0.8M parameters,
# 14 GFLOP) 9.7 vs 6.0 idle, 4.4 vs 6.1 beside it. More threads keep ≥ 0.5× of their idle speed under
# that load only once a step takes ≳ 0.3 s on one thread (≈ 3e10 FLOPs here), hence the threshold.
SMALL_STEP_FLOPS = 3e10
_cpu_share: int | None = None  # the cores this process may use; None: all of them (see set_cpu_share)


def available_cpus() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def set_cpu_share(cpus: int | None) -> None:
    """Say how many cores this process's runs may use (a sweep worker: cores // workers; a Ray task:
    its num_cpus); None: every core. ``trainer.threads`` is chosen and checked against it."""
    global _cpu_share
    _cpu_share = None if cpus is None else max(1, int(cpus))


def cpu_share() -> int:
    return available_cpus() if _cpu_share is None else _cpu_share


def step_flops(parameters: int, batch_size: int, seq_len: int) -> float:
    """A training step's FLOPs, the usual estimate: 6 per parameter per token (forward + backward)."""
    return 6.0 * parameters * batch_size * seq_len


def choose_threads(threads: int | Literal["auto"], flops: float, cpus: int | None = None,
                   env: dict | None = None) -> int:
    """The intra-op threads of a run whose step costs ``flops``, on ``cpus`` cores (default: this
    process's share, see set_cpu_share).

    ``auto``: 1 thread below SMALL_STEP_FLOPS (there more threads gain ≤ 1.6× idle and lose 2-10× under
    load), else every core of the share, at most ``OMP_NUM_THREADS`` when that is set. An int N is
    used as given; more than ``cpus`` is a ConfigError. So workers × threads ≤ cores whenever
    workers ≤ cores.
    """
    check_threads(threads)
    cpus = cpu_share() if cpus is None else max(1, int(cpus))
    if threads != "auto":
        if threads > cpus:
            raise ConfigError(f"trainer.threads={threads} is more than the {cpus} core(s) a run has here "
                              f"({available_cpus()} on this machine, shared by the sweep's workers or set by "
                              f"Ray's --num-cpus); use --threads {cpus} or auto")
        return threads
    if flops < SMALL_STEP_FLOPS:
        return 1
    limit = (os.environ if env is None else env).get("OMP_NUM_THREADS", "")
    if limit.strip().isdigit() and int(limit) >= 1:
        cpus = min(cpus, int(limit))
    return cpus
