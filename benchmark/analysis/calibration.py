"""A ladder's calibration table: on which candidate rungs does a mixer show the phenomenon?

For a results folder (a calibration screen: one mixer, candidate rungs, a few learning rates), per
group and per setting (the task keys and ``optim.lr`` that vary within the group), over its seeds:

- emerged: the seeds whose greedy accuracy reached the emergence threshold, and the Kaplan–Meier
  median emergence step (censored at the steps a run trained);
- the held plateau (``emergence_bench.stats.held_plateau``): the runs with a plateau worth the name
  (``row_curves.worth``), and of them those whose train loss held one and those most of whose
  dropped cells each held one; the Kaplan–Meier median of the train loss's plateau end;
- abruptness by the frozen rule (``emergence_bench.stats.transition_fit``): the output cells abrupt,
  of those whose loss fell by a tenth of chance − floor, and the seeds with most of their dropping
  cells abrupt.

A rung is kept for a ladder where, in at least 3 of 4 seeds, the plateau is worth the name and most
cells are abrupt (docs/ladder-v4-calibration.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from emergence_bench.results.row import Row, emergence_step, step_budget
from emergence_bench.results.row_curves import cell_fits, cells_worth, min_drop, plateau_time, run_worth, worth
from emergence_bench.results.store import load_groups
from emergence_bench.stats.medians import kaplan_meier_median

TABLE_FILE = "calibration.md"


def _flat(prefix: str, section: dict[str, Any]) -> dict[str, Any]:
    return {f"{prefix}.{key}": value for key, value in section.items() if not isinstance(value, (dict, list))}


def settings(rows: Sequence[Row]) -> list[tuple[str, list[Row]]]:
    """The group's rows by setting: ``task.length=16, optim.lr=0.001`` (the task keys and the lr that
    vary among ``rows``; the task's name where nothing varies), in order of those values."""
    flats = [{"task.name": r["config"]["task"]["name"], **_flat("task", r["config"]["task"]),
              "optim.lr": r["config"].get("optim", {}).get("lr")} for r in rows]
    varying = sorted(k for k in flats[0] if k not in ("task.task_seed",)
                     and len({json.dumps(f.get(k), default=str) for f in flats}) > 1)
    keys = varying or ["task.name"]
    by: dict[tuple, list[Row]] = {}
    for flat, row in zip(flats, rows):
        by.setdefault(tuple(flat.get(k) for k in keys), []).append(row)
    return [(", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in zip(keys, values)), members)
            for values, members in sorted(by.items(), key=lambda item: [_order(v) for v in item[0]])]


def _order(value: Any) -> tuple[int, float, str]:
    """Numbers in numeric order, before anything else in text order."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, json.dumps(value, default=str))


def setting_row(rows: Sequence[Row]) -> dict[str, Any]:
    """The calibration columns (module docstring) over one setting's seeds."""
    trained = [r for r in rows if r["status"] in ("ok", "diverged")]
    steps = [emergence_step(r) for r in trained]
    times = [float(s) if s is not None else float(step_budget(r)) for s, r in zip(steps, trained)]
    ends = [t for r in trained if (t := plateau_time(r)) is not None]
    abrupt = dropping = mostly_abrupt = 0
    for r in trained:
        fits = [f for f in cell_fits(r) if f is not None and f.high - f.low >= min_drop(r)]
        count = sum(f.abrupt for f in fits)
        abrupt, dropping = abrupt + count, dropping + len(fits)
        mostly_abrupt += bool(fits) and 2 * count > len(fits)
    return {"seeds": len(trained), "emerged": sum(s is not None for s in steps),
            "median_emergence": kaplan_meier_median(times, [s is None for s in steps]) if trained else None,
            "worth": sum(worth(r) for r in trained), "worth_by_loss": sum(run_worth(r) for r in trained),
            "worth_by_cells": sum(cells_worth(r) for r in trained),
            "median_plateau_end": kaplan_meier_median([t for t, _ in ends], [c for _, c in ends]) if ends else None,
            "abrupt_cells": abrupt, "dropping_cells": dropping, "mostly_abrupt_seeds": mostly_abrupt,
            "budget": max((step_budget(r) for r in trained), default=0)}


def calibration(root: str | Path) -> list[dict[str, Any]]:
    """One row per group and setting of the results folder ``root`` (``setting_row``'s columns)."""
    return [{"group": group, "setting": label, **setting_row(members)}
            for group, rows in load_groups(root).items() for label, members in settings(rows)]


def to_markdown(table: list[dict[str, Any]]) -> str:
    """The calibration table as Markdown (``>N``: a median not reached within N steps)."""
    def median(value: float | None, budget: int) -> str:
        return f">{budget}" if value is None else f"{value:.0f}"

    lines = ["| group | setting | emerged | median emergence | plateau worth the name (by the loss, by the cells) | "
             "median plateau end | abrupt cells by the rule | seeds with most cells abrupt |",
             "|---|---|---|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['group']} | {r['setting']} | {r['emerged']}/{r['seeds']} | "
                     f"{median(r['median_emergence'], r['budget'])} | "
                     f"{r['worth']}/{r['seeds']} ({r['worth_by_loss']}, {r['worth_by_cells']}) | "
                     f"{median(r['median_plateau_end'], r['budget'])} | {r['abrupt_cells']}/{r['dropping_cells']} | "
                     f"{r['mostly_abrupt_seeds']}/{r['seeds']} |")
    return "\n".join(lines) + "\n"
