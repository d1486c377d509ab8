"""Emergence: the first eval step at which greedy accuracy on the scored tokens reaches τ (its section
and leaderboard columns: ``emergence_bench.measurements.emergence``)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property
from typing import TYPE_CHECKING, Any

import lightning as L

from emergence_bench.registry import register_callback

if TYPE_CHECKING:
    from emergence_bench.tasks.base import SyntheticTask


@register_callback("emergence")
class Emergence(L.Callback):
    """Records eval accuracy overall and per output cell; the emergence step of each is the first
    eval step with accuracy ≥ τ (censored when never reached).

    τ is ``threshold`` × the task's reachable ``max_accuracy`` when ``relative`` (the default), so
    a task whose Bayes accuracy is below 0.95 (cellular automata: ≈0.93–0.95) can still emerge;
    ``relative: false`` takes ``threshold`` as an absolute accuracy. With ``stop`` the run ends at
    the eval where it emerged (a sweep that only asks "when?" saves the rest of the budget).
    """

    def __init__(self, task: SyntheticTask, threshold: float = 0.95, relative: bool = True, stop: bool = False) -> None:
        if not 0 < threshold <= 1:
            raise ValueError(f"emergence.threshold must be in (0, 1], got {threshold}")
        self.task = task
        self.requested_threshold, self.relative, self.stop = threshold, relative, stop
        self.history: list[tuple[int, float, list[float]]] = []  # (step, accuracy, per-cell accuracy)

    @cached_property
    def max_accuracy(self) -> float:
        return float(getattr(self.task, "max_accuracy", 1.0))

    @cached_property
    def threshold(self) -> float:
        """τ, the accuracy that counts as emerged (computed on first use: the task's max_accuracy
        may need an oracle pass)."""
        return effective_threshold(self.requested_threshold, self.relative, self.task)

    def update(self, step: int, accuracy: float, cell_accuracy: list[float]) -> None:
        self.history.append((step, float(accuracy), [float(a) for a in cell_accuracy]))

    def on_validation_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        e = pl_module.last_eval
        self.update(e.step, e.accuracy, e.cell_accuracy.tolist())
        if self.stop and e.accuracy >= self.threshold:
            trainer.should_stop = True

    @property
    def emerged_at(self) -> int | None:
        """The first eval step with accuracy ≥ τ so far; None while it has not come."""
        return self._first((s, a) for s, a, _ in self.history)

    def _first(self, accuracies: Iterable[tuple[int, float]]) -> int | None:
        return next((step for step, acc in accuracies if acc >= self.threshold), None)

    def report(self) -> dict:
        step = self.emerged_at
        cells = len(self.history[0][2]) if self.history else 0
        per_position = [self._first((s, c[i]) for s, _, c in self.history) for i in range(cells)]
        return {
            "threshold": self.threshold,
            "requested_threshold": self.requested_threshold,
            "relative": self.relative,
            "stopped": self.stop and step is not None,
            "max_accuracy": self.max_accuracy,
            "step": step,
            "censored": step is None,
            "per_position": per_position,
            "history": [[s, a] for s, a, _ in self.history],
        }

    def state_dict(self) -> dict:
        return {"history": [list(h) for h in self.history]}

    def load_state_dict(self, state: dict) -> None:
        self.history = [(s, a, list(c)) for s, a, c in state["history"]]


def effective_threshold(threshold: float, relative: bool, task: SyntheticTask) -> float:
    """The accuracy that counts as emerged: ``threshold`` × ``task.max_accuracy`` when relative."""
    return threshold * float(getattr(task, "max_accuracy", 1.0)) if relative else threshold
