"""Abruptness: was a run's transition a phase change after a plateau, or a smooth learning curve?

Derived from the recorder's eval curves (``curves.eval_cells``: the eval loss of each output cell at
each eval), so every run has it, rows written before it existed too, and no run id changed when it
came. Per output cell, ``emergence_bench.abruptness.transition`` times the cell's drop: the shortest
window of evals holding 80% of it, as a share of the time until that window ended; a share ≤ 0.25 is
abrupt. A cell whose loss fell by less than a tenth of the task's chance-to-floor gap has no
transition to time (it never left its plateau, or it was never on one).

Its leaderboard column, ``abrupt cells (median share)``, counts over a group's runs the cells whose
transition was abrupt, of those that had one, with the median share: ``21/24 (0.09)``. It tells a
family that shows the phenomenon (linear map: each cell's loss drops late and fast) from one that
measures how fast accuracy accrues (a share near 1: the loss fell from the first eval on).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from emergence_bench.abruptness import cell_transitions
from emergence_bench.columns import Computed, missing
from emergence_bench.measurement import Measurement, register_measurement
from emergence_bench.result_row import Curves, Row, section

COLUMNS = ("abrupt_cells", "cells_with_transition", "median_transition_share")


def abrupt_cells(runs: Sequence[Row]) -> dict[str, Any]:
    """Over ``runs``: the cells whose transition was abrupt, the cells with a transition, and the
    median share of those transitions (None where no cell had one)."""
    found = [t for r in runs for t in cell_transitions(r) if t is not None]
    return {"abrupt_cells": sum(t.abrupt for t in found), "cells_with_transition": len(found),
            "median_transition_share": statistics.median(t.share for t in found) if found else None}


def _cell(row: dict[str, Any]) -> str:
    if missing(row["median_transition_share"]):
        return "-"
    return f"{row['abrupt_cells']}/{row['cells_with_transition']} ({row['median_transition_share']:.2f})"


ABRUPTNESS = register_measurement(Measurement(
    "abruptness", section="curves", fields=Curves,
    applies=lambda row: bool(section(row, "curves").get("eval_cells")),
    columns=(Computed(COLUMNS, abrupt_cells, better=None, header="abrupt cells (median share)", cell=_cell,
                      show=lambda rows: any(not missing(row["median_transition_share"]) for row in rows)),)))
