"""What a run knows of its own losses, and the one sequence that takes them in: the losses read back
from the device are checked, kept, and handed to the run's callbacks.

A run alone (``EmergenceModule``) and each seed of a seed-parallel group (``SeedView``) are both a
``RunLosses``: the fields are the ``MeasuredModule`` ones callbacks read (callbacks/contract.py), and
the sequence is written here once. What differs between the two engines stays with them: a run
alone raises its ``Diverged`` and lets Lightning end it; a seed ends alone and the group goes on.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Iterable

from emergence_bench.callbacks.contract import EvalResult
from emergence_bench.engine.training import Diverged, finite_prefix

FINAL_LOSS_WINDOW = 50  # final_train_loss is the mean over this many last steps


class RunLosses:
    """A run's losses: the last ``FINAL_LOSS_WINDOW`` read back (scored and every-row), the latest
    one, and the latest eval. Call ``start_losses`` in the host's ``__init__``."""

    last_train_loss: float
    recent_train_losses: deque[float]
    recent_full_sequence_losses: deque[float]
    last_eval: EvalResult | None

    def start_losses(self) -> None:
        self.last_train_loss = math.nan
        self.recent_train_losses = deque(maxlen=FINAL_LOSS_WINDOW)
        self.recent_full_sequence_losses = deque(maxlen=FINAL_LOSS_WINDOW)
        self.last_eval = None

    def take_losses(self, steps: list[int], losses: list[float], full_losses: list[float]) -> Diverged | None:
        """Keep the losses of the steps just read back, in order, up to the first non-finite one;
        returns that step's Diverged (None when every loss is finite)."""
        finite, diverged = finite_prefix(losses, full_losses, steps)
        if finite:
            self.recent_train_losses.extend(losses[:finite])
            self.recent_full_sequence_losses.extend(full_losses[:finite])
            self.last_train_loss = losses[finite - 1]
        return diverged

    def deliver_losses(self, callbacks: Iterable[object], trainer: object, steps: list[int],
                       losses: list[float]) -> None:
        """Hand the losses just read back to every callback that takes them (``on_train_losses``,
        the suite's one hook beyond Lightning's: callbacks/contract.py)."""
        for callback in callbacks:
            hook = getattr(callback, "on_train_losses", None)
            if callable(hook):
                hook(trainer, self, steps, losses)

    def losses_state(self) -> dict:
        """What ``load_losses_state`` needs to go on as if never stopped (a resume point's): plain values."""
        return {"last": self.last_train_loss, "recent": list(self.recent_train_losses),
                "recent_full": list(self.recent_full_sequence_losses),
                "last_eval": None if self.last_eval is None else dataclasses.asdict(self.last_eval)}

    def load_losses_state(self, state: dict) -> None:
        self.start_losses()
        self.last_train_loss = state["last"]
        self.recent_train_losses.extend(state["recent"])
        self.recent_full_sequence_losses.extend(state["recent_full"])
        self.last_eval = None if state["last_eval"] is None else EvalResult(**state["last_eval"])

    def step_metrics(self) -> dict[str, float]:
        """The scalars logged at a step's read: that step's losses."""
        return {"train/loss": self.last_train_loss, "train/full_sequence_loss": self.recent_full_sequence_losses[-1]}
