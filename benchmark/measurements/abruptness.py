"""Abruptness: was a run's transition a phase change after a plateau, or a smooth learning curve?

Derived from the recorder's eval curves (``curves.eval_cells``: the eval loss of each output cell at
each eval), so every run has it, rows written before it existed too, and no run id changed when it
came. Per output cell, ``emergence_bench.stats.transition_share.transition`` times the cell's drop: the shortest
window of evals holding 80% of it, as a share of the time until that window ended; a share ≤ 0.25 is
abrupt. A cell whose loss fell by less than a tenth of the task's chance-to-floor gap has no
transition to time (it never left its plateau, or it was never on one).

Its leaderboard column, ``abrupt cells (median share)``, counts over a group's runs the cells whose
transition was abrupt, of those that had one, with the median share: ``21/24 (0.09)``. It tells a
family that shows the phenomenon (linear map: each cell's loss drops late and fast) from one that
measures how fast accuracy accrues (a share near 1: the loss fell from the first eval on).

The share ties abruptness to timing (a drop of fixed width reads more abrupt the later it comes), so
the verdict is the abruptness *rule* (``emergence_bench.stats.transition_fit``): per cell, a plateau then a
logistic drop must beat a power law and an exponential from step 0 by BIC, within 0.3 decades. Its
column, ``abrupt cells by the rule (onset, decades)``, counts over a group's runs the cells abrupt by
the rule, of those whose curve fell by a tenth of chance − floor, with the median onset (the drop's
10% point) and width in decades of the abrupt ones: ``22/24 (onset 380, 0.07 dec)``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from emergence_bench.measurements import register_measurement
from emergence_bench.results.columns import Computed, missing
from emergence_bench.results.measurement import Measurement
from emergence_bench.results.row import Curves, Row, section
from emergence_bench.results.row_curves import cell_fits, cell_transitions, min_drop

COLUMNS = ("abrupt_cells", "cells_with_transition", "median_transition_share")
RULE_COLUMNS = ("abrupt_cells_rule", "cells_with_drop", "median_onset", "median_decades")


def abrupt_cells(runs: Sequence[Row]) -> dict[str, Any]:
    """Over ``runs``: the cells whose transition was abrupt, the cells with a transition, and the
    median share of those transitions (None where no cell had one)."""
    found = [t for r in runs for t in cell_transitions(r) if t is not None]
    return {"abrupt_cells": sum(t.abrupt for t in found), "cells_with_transition": len(found),
            "median_transition_share": statistics.median(t.share for t in found) if found else None}


def abrupt_cells_by_rule(runs: Sequence[Row]) -> dict[str, Any]:
    """Over ``runs``: the cells abrupt by the rule, the cells whose curve fell by at least a tenth of
    chance − floor, and the median onset and width in decades of the abrupt ones (None: none)."""
    fits = [f for r in runs for f in cell_fits(r) if f is not None and f.high - f.low >= min_drop(r)]
    abrupt = [f for f in fits if f.abrupt]
    return {"abrupt_cells_rule": len(abrupt), "cells_with_drop": len(fits),
            "median_onset": statistics.median(f.onset for f in abrupt) if abrupt else None,
            "median_decades": statistics.median(f.decades for f in abrupt) if abrupt else None}


def _rule_cell(row: dict[str, Any]) -> str:
    if missing(row["cells_with_drop"]) or not row["cells_with_drop"]:
        return "-"
    if missing(row["median_onset"]):
        return f"0/{row['cells_with_drop']}"
    return (f"{row['abrupt_cells_rule']}/{row['cells_with_drop']} (onset {row['median_onset']:.0f}, "
            f"{row['median_decades']:.2f} dec)")


def _cell(row: dict[str, Any]) -> str:
    if missing(row["median_transition_share"]):
        return "-"
    return f"{row['abrupt_cells']}/{row['cells_with_transition']} ({row['median_transition_share']:.2f})"


ABRUPTNESS = register_measurement(Measurement(
    "abruptness", section="curves", fields=Curves,
    applies=lambda row: bool(section(row, "curves").get("eval_cells")),
    columns=(Computed(RULE_COLUMNS, abrupt_cells_by_rule, better=None,
                      header="abrupt cells by the rule (onset, decades)", cell=_rule_cell,
                      show=lambda rows: any(not missing(row["cells_with_drop"]) and row["cells_with_drop"]
                                            for row in rows)),
             Computed(COLUMNS, abrupt_cells, better=None, header="abrupt cells by the share (median share)", cell=_cell,
                      show=lambda rows: any(not missing(row["median_transition_share"]) for row in rows)),)))
