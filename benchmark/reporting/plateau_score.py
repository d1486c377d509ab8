"""The first-drop score: how soon each mixer's loss first leaves chance, against a baseline mixer.

It was called the plateau score; it does not measure the paper's plateau. A run's *first loss drop*
is the Plateau callback's end step: the first step whose smoothed train loss is below a threshold
just under chance (or the task's shortcut). On the ranking's ladders that step comes tens of steps in,
long before emergence: it times the fall from chance to the shortcut's level, not the hold there
(``emergence_bench.stats.held_plateau`` measures the hold and its end; `rank` shows it per cell, and
docs/ranking.md says which families have one). A run that emerged without a first drop (it stopped at
emergence while its smoothed loss still lagged above the threshold) had dropped by its emergence
step, which is used; a run that did neither is censored at the steps it ran.

Per cell (mixer, family, rung): the Kaplan–Meier median first drop m, and its ratio m / m_base to
the baseline mixer's median in the same family and rung. A median that is not reached counts as the
cell's budget: the estimand is the median of min(T, budget), which every run measures, so a ratio
whose own median is not reached is a lower bound (``>``) and one whose baseline's is not reached an
upper bound (``<``). Its 95% interval is a percentile bootstrap: every cell's seeds resampled with
replacement, the KM medians recomputed on each resample (so each draw respects the censoring),
``DRAWS`` draws from a fixed generator seed, so the numbers re-run.

Per mixer: the geometric mean of its cell ratios over the cells it shares with the baseline, leaving
out those where neither median is reached (they say nothing about the ratio), with the interval from
the same draws (the baseline's resample is shared by every mixer within a draw). A bound cell enters
at its bound, which pulls the mean toward 1; where every cell is a bound of one kind, so is the mean.

The keys: cells ``median_first_drop``; mixers ``first_drop_ratio``, ``first_drop_low``,
``first_drop_high``, ``first_drop_cells``, ``first_drop_bound`` (``plateau_*`` in rank.json files
written before the rename: ``OLD_KEYS`` maps them).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from emergence_bench.config import ConfigError
from emergence_bench.measurements.plateau import PLATEAU
from emergence_bench.results.row import ResultRow, emergence_step, step_budget
from emergence_bench.stats.medians import kaplan_meier_medians

DRAWS = 2000
SEED = 0


# rank.json's keys before the score was named for what it measures -> their names now.
OLD_KEYS = {"median_plateau_end": "median_first_drop", "plateau_ratio": "first_drop_ratio",
            "plateau_low": "first_drop_low", "plateau_high": "first_drop_high", "plateau_cells": "first_drop_cells",
            "plateau_bound": "first_drop_bound", "plateau": "first_drop"}


def renamed(data: dict) -> dict:
    """A rank.json written before the rename, with its first-drop keys (its ``plateau`` part and the
    ranking's and cells' ``plateau_*`` columns) under their names now; a new one unchanged."""
    def rows(part: object) -> object:
        return [{OLD_KEYS.get(k, k): v for k, v in row.items()} if isinstance(row, dict) else row
                for row in part] if isinstance(part, list) else part
    return {OLD_KEYS.get(k, k) if k == "plateau" else k: rows(v) if k in ("ranking", "cells", "plateau") else v
            for k, v in data.items()}


def first_drop(record: ResultRow) -> tuple[float, bool]:
    """(time, censored) of one run's first loss drop (see the module docstring)."""
    end = PLATEAU.read(record).get("first_drop_step")
    if end is not None:
        return float(end), False
    emerged = emergence_step(record)
    if emerged is not None:
        return float(emerged), False
    return float(step_budget(record)), True


Time = Callable[[ResultRow], "tuple[float, bool] | None"]  # a run's (time, censored); None: not measured


def _sample(members: list[ResultRow], time: Time) -> tuple[np.ndarray, np.ndarray, float]:
    """A cell's measured runs as (times [n], censored [n], budget)."""
    ends = [t for r in members if r["status"] in ("ok", "diverged") and (t := time(r)) is not None]
    times = np.array([t for t, _ in ends], dtype=float)
    budget = max(max(step_budget(r) for r in members),
                 float(times.max(initial=0)))
    return times, np.array([c for _, c in ends], dtype=bool), budget


def _medians(times: np.ndarray, censored: np.ndarray, budget: float, rows: np.ndarray) -> np.ndarray:
    """[R]: the KM medians of the resamples ``rows`` ([R, n] indices), not reached -> the budget."""
    return np.minimum(kaplan_meier_medians(times[rows], censored[rows]), budget)


def score(cells: dict[tuple[str, str, str], list[ResultRow]], baseline: str, draws: int = DRAWS,
          seed: int = SEED, time: Time = first_drop, name: str = "first_drop") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per cell and per mixer ratios of a time (``time``: the first drop by default; the held plateau's
    end is ``emergence_bench.results.row_curves.plateau_time``, named ``held_plateau``) to ``baseline``'s,
    with bootstrap intervals.

    cells: (mixer, family, rung) -> the cell's result records. Returns (cell table, mixer table):
    cell rows hold ``median_{name}``, reached, ratio, low, high, bound ('>', '<' or ''); mixer rows
    hold the geometric-mean ``{name}_ratio``, ``_low``, ``_high``, the ``_cells`` it covers and ``_bound``.
    """
    mixers = sorted({mixer for mixer, _, _ in cells})
    if baseline not in mixers:
        raise ConfigError(f"--baseline {baseline!r} is not a mixer of these results; mixers: {', '.join(mixers)}")
    rng = np.random.default_rng(seed)
    point, drawn, reached = {}, {}, {}
    for key in sorted(cells):
        times, censored, budget = _sample(cells[key], time)
        if not len(times):
            continue
        own = kaplan_meier_medians(times[None], censored[None])[0]
        point[key], reached[key] = min(own, budget), bool(np.isfinite(own))
        drawn[key] = _medians(times, censored, budget, rng.integers(0, len(times), size=(draws, len(times))))
    rows: list[dict] = []
    logs: dict[str, list[np.ndarray]] = {}
    for (mixer, family, rung) in sorted(point):
        base = (baseline, family, rung)
        row = {"mixer": mixer, "family": family, "rung": rung, f"median_{name}": point[mixer, family, rung],
               "reached": reached[mixer, family, rung], "ratio": None, "low": None, "high": None, "bound": "",
               "informative": False}
        if base in point:
            log_draws = np.log(drawn[mixer, family, rung]) - np.log(drawn[base])
            row.update(ratio=point[mixer, family, rung] / point[base],
                       low=float(np.exp(np.quantile(log_draws, 0.025))),
                       high=float(np.exp(np.quantile(log_draws, 0.975))),
                       bound=">" if not reached[mixer, family, rung] and reached[base]
                       else "<" if reached[mixer, family, rung] and not reached[base] else "")
            if mixer != baseline and (reached[mixer, family, rung] or reached[base]):
                logs.setdefault(mixer, []).append(log_draws)
            row["informative"] = reached[mixer, family, rung] or reached[base]
        rows.append(row)
    cell_table = pd.DataFrame(rows, columns=["mixer", "family", "rung", f"median_{name}", "reached", "ratio", "low",
                                             "high", "bound", "informative"])
    summary = []
    for mixer in mixers:
        if mixer == baseline:
            summary.append({"mixer": mixer, f"{name}_ratio": 1.0, f"{name}_low": 1.0, f"{name}_high": 1.0,
                            f"{name}_cells": int((cell_table["mixer"] == mixer).sum()), f"{name}_bound": ""})
            continue
        mine = cell_table[(cell_table["mixer"] == mixer) & cell_table["informative"]]
        if not len(mine):
            summary.append({"mixer": mixer, f"{name}_ratio": None, f"{name}_low": None, f"{name}_high": None,
                            f"{name}_cells": 0, f"{name}_bound": ""})
            continue
        mean_logs = np.mean(logs[mixer], axis=0)
        bounds = set(mine["bound"])
        summary.append({"mixer": mixer, f"{name}_ratio": math.exp(float(np.log(mine["ratio"].astype(float)).mean())),
                        f"{name}_low": float(np.exp(np.quantile(mean_logs, 0.025))),
                        f"{name}_high": float(np.exp(np.quantile(mean_logs, 0.975))),
                        f"{name}_cells": len(mine), f"{name}_bound": bounds.pop() if len(bounds) == 1 else ""})
    return cell_table, pd.DataFrame(summary)
