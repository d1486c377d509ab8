"""The plateau (``callbacks/plateau.py`` records it): the held plateau's end, whether it is worth the
name, and the first drop from chance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from emergence_bench.measurements import register_measurement
from emergence_bench.results.columns import Computed, Median, missing
from emergence_bench.results.measurement import Measurement, every_run
from emergence_bench.results.row import Row, plateau_section
from emergence_bench.results.row_curves import worth


class PlateauSection(TypedDict, total=False):
    # The held plateau (emergence_bench.stats.held_plateau): absent in an upgraded row without a curve.
    end_step: int | None  # where the last sharp drop starts; None: still held at the budget (censored)
    censored: bool
    start_step: int | None  # where the hold began (None: no hold, the loss fell at once)
    level: float | None  # the loss held
    drop: float | None  # from the level to the curve's end
    drop_width: int | None  # steps from the end to 80% of that drop
    worth: bool  # a plateau worth the name (held most of the time to its end, twice its drop's width)
    # The first drop from chance.
    threshold: float
    shortcut_loss: float | None
    measures_shortcut: bool  # the threshold lies above the shortcut baseline
    first_drop_step: int | None  # None: never crossed within the budget (censored)
    first_drop_censored: bool
    budget: int
    spans: list[list[int]]  # [start, end] stretches where the smoothed loss was flat
    per_position: list[int | None]  # per output cell: the first eval step below the threshold


def _worth_cell(row: dict[str, Any]) -> str:
    if missing(row["held_measured_runs"]) or not row["held_measured_runs"]:
        return "-"
    return f"{row['held_worth']}/{row['held_measured_runs']}"


def _held_counts(runs: Sequence[Row]) -> dict[str, Any]:
    """The runs with a plateau worth the name, by the loss or by the cells (``row_curves.worth``), of
    those that measured one."""
    measured = [r for r in runs if "worth" in plateau_section(r)]
    return {"held_worth": sum(1 for r in measured if worth(r)), "held_measured_runs": len(measured)}


# The held plateau's end (only rows that measured it: an upgraded row without a curve did not), with the
# runs whose plateau is worth the name; then the first drop, "(shortcut)" where its threshold lies above
# the task's shortcut baseline (the recorder's plateau_measures_shortcut).
PLATEAU = register_measurement(Measurement(
    "plateau", section="plateau", fields=PlateauSection, applies=lambda row: "worth" in plateau_section(row),
    columns=(Median("median_plateau_end", "end_step", interval=("plateau_low", "plateau_high"),
                    measured="plateau_measured", header="median plateau end (95% CI)",
                    ratios="plateau", against_none=True),
             Computed(("held_worth", "held_measured_runs"), _held_counts, better=None,
                      header="plateaus worth the name", cell=_worth_cell)),
    figures=("curves", "axes", "thresholds")))

FIRST_DROP = register_measurement(Measurement(
    "first_drop", section="plateau", fields=PlateauSection, applies=every_run,
    columns=(Median("median_first_drop", "first_drop_step", interval=("first_drop_low", "first_drop_high"),
                    measured="first_drop_measured", header="median first drop (95% CI)",
                    note=("plateau_measures_shortcut", " (shortcut)"), ratios="first_drop"),)))
