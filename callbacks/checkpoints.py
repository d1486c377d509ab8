"""CheckpointSchedule: keep the model's weights at log-spaced steps and every K steps."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
import torch

from emergence_bench.results.atomic import write_atomic
from emergence_bench.results.store import CHECKPOINT_DIR

if TYPE_CHECKING:
    from emergence_bench.callbacks.contract import MeasuredModule

_NAME = re.compile(r"step_(\d+)\.pt$")


def schedule(max_steps: int, every: int = 0, log_spaced: bool = False) -> list[int]:
    """The steps to keep: 0 and max_steps, every ``every`` steps, and 1, 2, 4, 8, ... if log-spaced."""
    steps = {0, max_steps}
    if every > 0:
        steps.update(range(every, max_steps + 1, every))
    if log_spaced:
        power = 1
        while power < max_steps:
            steps.add(power)
            power *= 2
    return sorted(steps)


def saved_checkpoints(run_dir: str | Path) -> dict[int, Path]:
    """step -> path of every checkpoint kept in ``run_dir``."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    found = {}
    for path in folder.glob("step_*.pt") if folder.is_dir() else []:
        match = _NAME.search(path.name)
        if match:
            found[int(match.group(1))] = path
    return dict(sorted(found.items()))


class CheckpointSchedule(L.Callback):
    """Saves ``{"step", "model": state_dict}`` (the SequenceModel only, no optimiser: small enough to
    keep for many seeds) to ``<run dir>/checkpoints/step_<N>.pt`` at each scheduled step; the file at
    step N holds the weights after N updates."""

    def __init__(self, run_dir: str | Path, max_steps: int, every: int = 0, log_spaced: bool = False) -> None:
        self.folder = Path(run_dir) / CHECKPOINT_DIR
        self.steps = set(schedule(max_steps, every, log_spaced))

    def save(self, pl_module: MeasuredModule, step: int) -> None:
        state = {"step": step, "model": pl_module.model.state_dict()}
        write_atomic(self.folder / f"step_{step:07d}.pt", lambda f: torch.save(state, f))

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        if trainer.global_step in self.steps:
            self.save(pl_module, trainer.global_step)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: torch.Tensor,
                           batch_idx: int) -> None:
        if trainer.global_step in self.steps:
            self.save(pl_module, trainer.global_step)
