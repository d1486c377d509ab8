"""A result row's recorded curves read by the statistics: the transitions of its eval losses (per
output cell and over every scored token: the share, ``emergence_bench.stats.transition_share``, and the
abruptness rule's model comparison, ``emergence_bench.stats.transition_fit``) and the plateau its train
loss held (``emergence_bench.stats.held_plateau``), one run's and a group's.

The statistics take steps and values and know nothing of rows; this module takes a row (its
``curves``, ``task_facts`` and plateau sections), so the statistics sit below the results they are
read from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from emergence_bench.results.row import Row, plateau_section, section, step_budget
from emergence_bench.stats.held_plateau import HeldPlateau, held_plateau
from emergence_bench.stats.medians import kaplan_meier_median
from emergence_bench.stats.transition_fit import TransitionFit, fit_transition
from emergence_bench.stats.transition_share import Transition, transition

MIN_DROP = 0.1  # of the task's chance − floor gap: a smaller drop in a result row's curve is no transition


# Its eval losses' transitions (the recorder's ``curves`` section), per output cell and over every scored token.


def cell_curves(row: Row) -> tuple[list[int], list[list[float]]]:
    """The eval steps [n] and, per output cell, its eval loss at each [cells][n] (empty where the row
    has no per-cell curve)."""
    points = section(row, "curves").get("eval_cells") or []
    steps = [int(step) for step, _ in points]
    cells = len(points[0][1]) if points else 0
    return steps, [[losses[i] for _, losses in points] for i in range(cells)]


def min_drop(row: Row) -> float:
    """The smallest loss drop that counts as a transition for this row's task."""
    facts = section(row, "task_facts")
    return MIN_DROP * (facts.get("chance_loss", 0.0) - facts.get("floor_loss", 0.0))


def cell_transitions(row: Row) -> list[Transition | None]:
    """Per output cell, its transition (None: no drop worth the name)."""
    steps, cells = cell_curves(row)
    floor = min_drop(row)
    return [transition(steps, losses, min_drop=floor) for losses in cells]


def loss_transition(row: Row) -> Transition | None:
    """The transition of the run's eval loss over every scored token."""
    points = section(row, "curves").get("eval") or []
    return transition([p[0] for p in points], [p[1] for p in points], min_drop=min_drop(row))


_FITS: dict[tuple, list[TransitionFit | None]] = {}  # a process's fits, by the curves they were fitted on


def cell_fits(row: Row) -> list[TransitionFit | None]:
    """Per output cell, the abruptness rule's model comparison (``emergence_bench.stats.transition_fit``;
    None: too few evals to judge). A fit costs milliseconds to tens of them, and the leaderboard, rank
    and the report each ask for every row's, so a process fits each curve once: keyed by the curves
    themselves (a row's run id names its config, not its curves)."""
    steps, cells = cell_curves(row)
    floor = min_drop(row)
    key = (floor, tuple(steps), tuple(tuple(losses) for losses in cells))
    if key not in _FITS:
        _FITS[key] = [fit_transition(steps, losses, min_drop=floor) for losses in cells]
    return _FITS[key]


def loss_fit(row: Row) -> TransitionFit | None:
    """The abruptness rule's model comparison on the run's eval loss over every scored token."""
    points = section(row, "curves").get("eval") or []
    return fit_transition([p[0] for p in points], [p[1] for p in points], min_drop=min_drop(row))


# The plateau its train loss held (``curves.train_loss``).


def run_plateau(row: Row) -> HeldPlateau | None:
    """The plateau of a result row's recorded train-loss curve (None: the row has no curve, or it
    never sat above the floor)."""
    points = section(row, "curves").get("train_loss") or []
    facts = section(row, "task_facts")
    if not points or "chance_loss" not in facts:
        return None
    return held_plateau([p[0] for p in points], [p[1] for p in points], facts["chance_loss"],
                        facts.get("floor_loss", 0.0))


def plateau_time(row: Row) -> tuple[float, bool] | None:
    """(time, censored) of a run's held-plateau end, for a Kaplan–Meier median: the end step, the
    run's budget where it was still held (censored), or the curve's first step where it held no
    plateau (it fell from the start, or ended within a few points); None where the row has no curve.
    Read from the row's plateau section where it holds them (rows of schema 3, or upgraded on read),
    else from its curve."""
    held = plateau_section(row)
    if "worth" in held:
        end = held.get("end_step")
        return (float(step_budget(row)), True) if end is None else (float(end), False)
    points = section(row, "curves").get("train_loss") or []
    if not points or "chance_loss" not in section(row, "task_facts"):
        return None
    found = run_plateau(row)
    if found is None:
        return float(points[0][0]), False
    if found.end is None:
        return float(step_budget(row)), True
    return float(found.end), False


def held_plateaus(runs: Sequence[Row]) -> dict[str, Any]:
    """Over ``runs``: the Kaplan–Meier median held-plateau end (None where not reached or no run has a
    curve), the runs whose plateau is worth the name, and the runs with a curve to read."""
    times = [t for r in runs if (t := plateau_time(r)) is not None]
    median = kaplan_meier_median([t for t, _ in times], [c for _, c in times]) if times else None
    return {"median_held_plateau_end": median, "runs_with_curves": len(times),
            "held_plateaus": sum(1 for r in runs if worth(r))}


def cell_plateaus(row: Row) -> list[HeldPlateau | None]:
    """Per output cell, the plateau its eval loss held (``cell_curves``; None: it held none), at the
    task's chance and floor per token; empty where the row has no per-cell curve."""
    steps, cells = cell_curves(row)
    facts = section(row, "task_facts")
    if "chance_loss" not in facts:
        return []
    return [held_plateau(steps, losses, facts["chance_loss"], facts.get("floor_loss", 0.0)) for losses in cells]


def cells_worth(row: Row) -> bool:
    """Whether most of the run's output cells that dropped (their held plateau ended) held a plateau
    worth the name before their drop: the paper's per-output-token dynamics, where cells drop one
    at a time, each after its own plateau, and the run's loss slides between the first and the last."""
    ended = [p for p in cell_plateaus(row) if p is not None and p.end is not None]
    return 2 * sum(p.worth for p in ended) > len(ended)


def run_worth(row: Row) -> bool:
    """Whether the run's train loss held a plateau worth the name (its plateau section, else its curve)."""
    held = plateau_section(row)
    if "worth" in held:
        return bool(held["worth"])
    found = run_plateau(row)
    return found is not None and found.worth


def worth(row: Row) -> bool:
    """Whether the run held a plateau worth the name: its loss held one (cells that learn together), or
    most of its dropped cells each held one (cells that learn one at a time, the linear map's
    staircase). docs/ladder-v4-calibration.md, "A plateau worth the name", has why both readings, and the screen
    the choice was made on."""
    return run_worth(row) or cells_worth(row)
