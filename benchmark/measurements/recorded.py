"""The recorder's own sections (``callbacks/recorder.py`` writes them: timing, metrics, task facts) as
leaderboard columns: the step budget, final losses, the shortcut baseline, the cells learned, speed.
They belong to no callback of their own; they come after the callbacks' in the leaderboard."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from emergence_bench.measurements import register_measurement
from emergence_bench.measurements.emergence import EMERGENCE
from emergence_bench.measurements.plateau import PLATEAU
from emergence_bench.results.columns import AnyOf, Computed, First, Mean, missing
from emergence_bench.results.measurement import Measurement, every_run
from emergence_bench.results.row import Metrics, Row, TaskFacts, Timing, section, step_budget


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
