"""Recorder: timing, final metrics, and the merged report of every callback that has one. The
leaderboard columns of its own sections (the step budget, final losses, the shortcut baseline, the
cells learned, speed) are declared in ``emergence_bench.measurements.recorded``."""

from __future__ import annotations

import math
import time
from typing import Any

import lightning as L


class Recorder(L.Callback):
    """Collects the columns of a result row. Any callback with ``report() -> dict`` adds a section
    under its registered name (so a plugin callback adds columns without touching the core).

    Also keeps the curves a report draws: the train loss averaged over every ``curve_every`` steps,
    eval loss and accuracy at every eval, and each output cell's eval loss at every eval (the
    staircase: capabilities arriving one cell at a time).
    """

    def __init__(self, curve_every: int = 10) -> None:
        self.curve_every = curve_every
        self.steps = 0
        self.train_seconds = 0.0
        self.eval_seconds = 0.0
        self.train_curve: list[list[float]] = []  # [step, mean train loss over the last curve_every]
        self.eval_curve: list[list[float]] = []  # [step, eval loss, eval accuracy]
        self.cell_curve: list[list] = []  # [step, [eval loss per output cell]]
        self._window: list[float] = []
        self._mark = 0.0  # when the step being timed began

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._mark = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.train_seconds += time.perf_counter() - self._mark
        self.steps = trainer.global_step

    def on_train_losses(self, trainer: L.Trainer, pl_module: Any, steps: list[int], losses: list[float]) -> None:
        for step, loss in zip(steps, losses):
            self._window.append(loss)
            if len(self._window) == self.curve_every:
                self.train_curve.append([step, sum(self._window) / len(self._window)])
                self._window = []

    def on_validation_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        self._eval_mark = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        self.eval_seconds += time.perf_counter() - self._eval_mark
        if not trainer.sanity_checking:
            e = pl_module.last_eval
            self.eval_curve.append([e.step, e.loss, e.accuracy])
            self.cell_curve.append([e.step, [round(x, 4) for x in e.cell_loss.tolist()]])

    def columns(self, trainer: Any, module: Any) -> dict:
        last_eval = getattr(module, "last_eval", None) if module is not None else None
        recent = list(getattr(module, "recent_train_losses", []))
        recent_full = list(getattr(module, "recent_full_sequence_losses", []))
        columns = {
            "timing": {
                "steps": self.steps,
                "train_seconds": round(self.train_seconds, 3),
                "eval_seconds": round(self.eval_seconds, 3),
                "steps_per_second": round(self.steps / self.train_seconds, 2) if self.train_seconds else None,
            },
            "metrics": {
                "final_train_loss": sum(recent) / len(recent) if recent else None,
                "final_eval_loss": last_eval.loss if last_eval else None,
                "final_eval_accuracy": last_eval.accuracy if last_eval else None,
                "final_eval_p_correct": last_eval.p_correct if last_eval else None,
                "final_train_full_sequence_loss": sum(recent_full) / len(recent_full) if recent_full else None,
                "final_eval_full_sequence_loss": last_eval.full_sequence_loss if last_eval else None,
                "final_eval_full_sequence_accuracy": last_eval.full_sequence_accuracy if last_eval else None,
            },
            "curves": {"train_loss": self.train_curve, "eval": self.eval_curve, "eval_cells": self.cell_curve},
        }
        if module is not None and getattr(module, "task", None) is not None:
            columns["task_facts"] = task_facts(module.task)
        for callback in trainer.callbacks if trainer is not None else []:
            if callback is not self and callable(getattr(callback, "report", None)):
                name = getattr(callback, "registered_name", type(callback).__name__.lower())
                columns[name] = _finite(callback.report())
        return columns

    def state_dict(self) -> dict:
        return {"steps": self.steps, "train_seconds": self.train_seconds, "eval_seconds": self.eval_seconds,
                "train_curve": self.train_curve, "eval_curve": self.eval_curve, "cell_curve": self.cell_curve,
                "window": self._window}

    def load_state_dict(self, state: dict) -> None:
        self.steps, self.train_seconds, self.eval_seconds = (
            state["steps"], state["train_seconds"], state["eval_seconds"])
        self.train_curve, self.eval_curve, self._window = state["train_curve"], state["eval_curve"], state["window"]
        self.cell_curve = state.get("cell_curve", [])


def task_facts(task: Any) -> dict:
    """What the task says about its own difficulty: chance, floor, shortcut baseline, reachable
    accuracy and (linear map) which output cells a shortcut through earlier outputs predicts."""
    facts = {"chance_loss": float(task.chance_loss), "floor_loss": float(task.floor_loss),
             "shortcut_loss": getattr(task, "shortcut_loss", None),
             "max_accuracy": float(getattr(task, "max_accuracy", 1.0))}
    if callable(getattr(task, "shortcut_cells", None)):
        facts["shortcut_cells"] = [bool(c) for c in task.shortcut_cells()]
    return facts


def _finite(value: Any) -> Any:
    """NaN/inf → None, recursively, so the JSON is strict."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
