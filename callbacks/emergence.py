"""Emergence: the first eval step at which greedy accuracy on the scored tokens reaches τ."""

from __future__ import annotations

import lightning as L

from benchmark.registry import register_callback


@register_callback("emergence")
class Emergence(L.Callback):
    """Records eval accuracy overall and per output cell; the emergence step of each is the first
    eval step with accuracy ≥ ``threshold`` (censored when never reached)."""

    def __init__(self, task, threshold: float = 0.95):
        if not 0 < threshold <= 1:
            raise ValueError(f"emergence.threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        self.history: list[tuple[int, float, list[float]]] = []  # (step, accuracy, per-cell accuracy)

    def update(self, step: int, accuracy: float, cell_accuracy: list[float]) -> None:
        self.history.append((step, float(accuracy), [float(a) for a in cell_accuracy]))

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        e = pl_module.last_eval
        self.update(e["step"], e["accuracy"], e["cell_accuracy"].tolist())

    def _first(self, accuracies) -> int | None:
        return next((step for step, acc in accuracies if acc >= self.threshold), None)

    def report(self) -> dict:
        step = self._first((s, a) for s, a, _ in self.history)
        cells = len(self.history[0][2]) if self.history else 0
        per_position = [self._first((s, c[i]) for s, _, c in self.history) for i in range(cells)]
        return {
            "threshold": self.threshold,
            "step": step,
            "censored": step is None,
            "per_position": per_position,
            "history": [[s, a] for s, a, _ in self.history],
        }

    def state_dict(self) -> dict:
        return {"history": [list(h) for h in self.history]}

    def load_state_dict(self, state: dict) -> None:
        self.history = [(s, a, list(c)) for s, a, c in state["history"]]
