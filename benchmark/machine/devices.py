"""Which torch device a run or an analysis uses, and how a result row names it.

One place for the three device questions of the suite, so a training run, a seed-parallel group and
an analysis never disagree about where ``auto`` puts them:

- ``accelerator_device(accelerator)``: where Lightning's Trainer (one device) puts the model for a
  config's ``trainer.accelerator``;
- ``resolve_device(name)``: the device of an analysis command's ``--device`` (auto | cpu | cuda[:i]);
- ``describe_device(device)``: the ``device`` column of a result row.
"""

from __future__ import annotations

import torch


def accelerator_device(accelerator: str) -> torch.device | None:
    """The device Lightning would pick for ``Trainer(accelerator=accelerator, devices=1)``: the CPU
    for ``cpu``, else the current CUDA device when there is one, else the CPU for ``auto``. None when
    the accelerator asked for cannot run on this machine (e.g. ``gpu`` without CUDA)."""
    if accelerator == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu") if accelerator == "auto" else None


def resolve_device(name: str = "auto") -> torch.device:
    """An analysis command's ``--device``: ``auto`` is CUDA when available, else the CPU; any other
    name is taken as torch spells it (``cpu``, ``cuda``, ``cuda:1``)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def describe_device(device: torch.device) -> str:
    """The ``device`` column of a result row: ``cpu``, or ``cuda (<GPU name>)`` so rows from
    different GPUs can be told apart."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return device.type
