"""Backend choice for kernel-backed mixers: the upstream GPU kernel or our pure-PyTorch reference.

``EMERGENCE_BENCH_BACKEND`` = ``auto`` (default: the kernel when the input is on CUDA and the package
imports, else the reference), ``reference`` (always the reference), or ``kernel`` (the kernel, and an
error rather than a fallback when it cannot run).
"""

from __future__ import annotations

import functools
import importlib
import os

import torch

ENV = "EMERGENCE_BENCH_BACKEND"
REFERENCE, KERNEL = "reference", "kernel"


@functools.cache
def importable(module: str) -> bool:
    """Whether ``module`` imports (cached; a GPU-only package fails on a CPU machine)."""
    try:
        importlib.import_module(module)
    except Exception:  # ImportError, or a CUDA/driver error raised at import time
        return False
    return True


def requested() -> str:
    choice = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if choice not in ("auto", REFERENCE, KERNEL):
        raise ValueError(f"{ENV} must be auto, reference or kernel, got {choice!r}")
    return choice


def choose(x: torch.Tensor, kernel_module: str) -> str:
    """The backend a forward on ``x`` uses, given the package module that holds the kernel."""
    choice = requested()
    if choice == REFERENCE:
        return REFERENCE
    runnable = x.is_cuda and importable(kernel_module)
    if choice == KERNEL and not runnable:
        where = "the input is on the CPU" if not x.is_cuda else f"{kernel_module} does not import"
        raise RuntimeError(f"{ENV}=kernel but the kernel cannot run: {where}")
    return KERNEL if runnable else REFERENCE
