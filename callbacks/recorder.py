"""Recorder: timing, final metrics, and the merged report of every callback that has one; and the
leaderboard columns of its own sections (the step budget, final losses, the shortcut baseline, the
cells learned, speed)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import lightning as L

from emergence_bench.callbacks.emergence import EMERGENCE
from emergence_bench.callbacks.plateau import PLATEAU
from emergence_bench.results.columns import AnyOf, Computed, First, Mean, missing
from emergence_bench.results.measurement import Measurement, every_run, register_measurement
from emergence_bench.results.row import Metrics, Row, TaskFacts, Timing, section, step_budget


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
                "train_curve": self.train_curve, "eval_curve": self.eval_curve, "window": self._window}

    def load_state_dict(self, state: dict) -> None:
        self.steps, self.train_seconds, self.eval_seconds = (
            state["steps"], state["train_seconds"], state["eval_seconds"])
        self.train_curve, self.eval_curve, self._window = state["train_curve"], state["eval_curve"], state["window"]


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


def _trained_on_every_row(row: Row) -> bool:
    # The full-sequence loss over every row, only where every row was trained: otherwise x0's rows
    # were never fit.
    return row["config"]["trainer"].get("train_on") == "all"


CELL_COLUMNS = ("pattern_cells_learned", "pattern_cells", "shortcut_cells_learned", "shortcut_cells")


def cells_learned(runs: Sequence[Row]) -> dict[str, Any]:
    """Mean over runs of the output cells that emerged, split by how they can be predicted: through
    the sparse pattern, or through the shortcut of earlier outputs (tasks that name shortcut cells)."""
    counts = []
    for r in runs:
        shortcut = section(r, "task_facts").get("shortcut_cells")
        per_cell = EMERGENCE.read(r).get("per_position")
        if shortcut is None or per_cell is None or len(per_cell) != len(shortcut):
            continue
        learned = [step is not None for step in per_cell]
        counts.append((sum(cell and not s for cell, s in zip(learned, shortcut)), shortcut.count(False),
                       sum(cell and s for cell, s in zip(learned, shortcut)), shortcut.count(True)))
    if not counts:
        return dict.fromkeys(CELL_COLUMNS)
    return {name: sum(c[i] for c in counts) / len(counts) for i, name in enumerate(CELL_COLUMNS)}


def _cells_cell(row: dict[str, Any]) -> str:
    """``1.5/2 + 1/2``: pattern cells learned of pattern cells, + shortcut cells learned of those."""
    if missing(row["pattern_cells"]):
        return "-"
    return (f"{row['pattern_cells_learned']:.3g}/{row['pattern_cells']:.3g} + "
            f"{row['shortcut_cells_learned']:.3g}/{row['shortcut_cells']:.3g}")


# The leaderboard columns of the recorder's sections, in the table's order (after the callbacks').
# The budget: every median's censoring point, the largest step budget of the group's trained runs.
BUDGET = register_measurement(Measurement(
    "budget", section="timing", fields=Timing, applies=every_run,
    columns=(Computed(("budget",), lambda runs: {"budget": max(map(step_budget, runs), default=0)}),)))
FINAL_LOSS = register_measurement(Measurement(
    "final_loss", section="metrics", fields=Metrics,
    columns=(Mean("final_eval_loss", "final_eval_loss", better="lower", header="final loss"),
             Mean("final_full_sequence_loss", "final_eval_full_sequence_loss", better="lower",
                  header="full-sequence loss", only=_trained_on_every_row)),
    figures=("heatmap",)))
SHORTCUT = register_measurement(Measurement(
    "shortcut", section="task_facts", fields=TaskFacts, applies=every_run,
    columns=(First("shortcut_loss", "shortcut_loss", better=None, header="shortcut loss"),
             AnyOf("plateau_measures_shortcut", "measures_shortcut", section=PLATEAU))))
CELLS_LEARNED = register_measurement(Measurement(
    "cells_learned", section="task_facts", fields=TaskFacts, applies=every_run,
    columns=(Computed(CELL_COLUMNS, cells_learned, better="higher", header="cells learned: pattern + shortcut",
                      cell=_cells_cell, show=lambda rows: any(not missing(row["pattern_cells"]) for row in rows)),),
    figures=("staircase",)))
# Speed over every run that timed a step, a failed one too.
SPEED = register_measurement(Measurement(
    "speed", section="timing", fields=Timing, runs="all",
    applies=lambda row: bool(section(row, "timing").get("steps_per_second")),
    columns=(Mean("steps_per_second", "steps_per_second", better="higher", header="steps/s", spec=".1f"),)))
