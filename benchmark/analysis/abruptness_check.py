"""The abruptness rule on real curves: what a reviewer checks before believing it.

For a results folder, per group of runs (the run id's group folder, else the task and mixer), over
every output cell's eval-loss curve:

- the cells with a drop (the plateau model fell by at least a tenth of chance − floor), those abrupt
  by the rule (``emergence_bench.stats.transition_fit``) and by the share (``emergence_bench.stats.transition_share``);
- the onset, the width in steps and in decades of the abrupt ones (medians over runs of each run's
  median, with the runs' range);
- the eval noise: the residual standard deviation of the best model, as a share of chance − floor;
- onset against share: Spearman's ρ over the cells with a drop (with a Fisher-z 95% interval). A
  strong positive ρ says the share reads a late drop as abrupt: timing and jump in one number;
- the surrogate null: per curve, its best power law plus its own residuals resampled; the share of
  those surrogates the rule reads abrupt (at most 5% for the rule to stand on this folder's noise).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from emergence_bench.results.row import Row
from emergence_bench.results.row_curves import cell_curves, cell_fits, cell_transitions, min_drop
from emergence_bench.results.store import load_groups
from emergence_bench.stats.transition_fit import fit_transition, smooth_surrogates


def spearman(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, float] | None:
    """Spearman's ρ of x and y [n] (average ranks on ties), with a Fisher-z 95% interval (standard
    error 1.06/√(n−3), Fieller et al.); None with fewer than 5 pairs or a constant side."""
    if len(x) < 5:
        return None
    rx = np.argsort(np.argsort(x, kind="stable"), kind="stable").astype(float)
    ry = np.argsort(np.argsort(y, kind="stable"), kind="stable").astype(float)
    rx, ry = _average_ties(np.asarray(x, float), rx), _average_ties(np.asarray(y, float), ry)
    if rx.std() == 0 or ry.std() == 0:
        return None
    rho = float(np.corrcoef(rx, ry)[0, 1])
    z, se = math.atanh(max(min(rho, 0.999999), -0.999999)), 1.06 / math.sqrt(len(x) - 3)
    return rho, math.tanh(z - 1.96 * se), math.tanh(z + 1.96 * se)


def _average_ties(values: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    out = ranks.copy()
    for v in np.unique(values):
        same = values == v
        if same.sum() > 1:
            out[same] = ranks[same].mean()
    return out


def _median_range(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "low": None, "high": None}
    return {"median": statistics.median(values), "low": min(values), "high": max(values)}


def check_group(rows: Sequence[Row], surrogate_draws: int = 20, seed: int = 0) -> dict[str, Any]:
    """The checks of the module docstring over one group's rows."""
    drops = abrupt = abrupt_share = 0
    onsets, shares, noises, per_run = [], [], [], []
    null_abrupt = null_total = 0
    for r, row in enumerate(rows):
        steps, curves = cell_curves(row)
        gap = 10 * min_drop(row)  # chance − floor
        run_onsets, run_widths, run_decades = [], [], []
        for c, (fit, share, losses) in enumerate(zip(cell_fits(row), cell_transitions(row), curves)):
            if fit is None:
                continue
            if gap > 0:
                noises.append(fit.noise / gap)
            if fit.high - fit.low < min_drop(row):
                continue
            drops += 1
            abrupt += fit.abrupt
            abrupt_share += bool(share is not None and share.abrupt)
            if share is not None:
                onsets.append(fit.onset)
                shares.append(share.share)
            if fit.abrupt:
                run_onsets.append(fit.onset)
                run_widths.append(fit.width)
                run_decades.append(fit.decades)
            for draw in smooth_surrogates(steps, losses, surrogate_draws, seed=seed + 1000 * r + c):
                found = fit_transition(steps, draw, min_drop=min_drop(row))
                null_total += 1
                null_abrupt += bool(found is not None and found.abrupt)
        if run_onsets:
            per_run.append((statistics.median(run_onsets), statistics.median(run_widths),
                            statistics.median(run_decades)))
    return {"runs": len(rows), "cells_with_drop": drops, "abrupt_by_rule": abrupt, "abrupt_by_share": abrupt_share,
            "onset": _median_range([p[0] for p in per_run]), "width": _median_range([p[1] for p in per_run]),
            "decades": _median_range([p[2] for p in per_run]),
            "noise": _median_range(noises) | {"p90": float(np.quantile(noises, 0.9)) if noises else None},
            "onset_share_spearman": spearman(onsets, shares),
            "surrogate_abrupt": null_abrupt, "surrogates": null_total}


def check_folder(root: str | Path, surrogate_draws: int = 20) -> dict[str, dict[str, Any]]:
    """``check_group`` per group of a results folder (``store.load_groups``)."""
    return {name: check_group(rows, surrogate_draws) for name, rows in load_groups(root).items()}


CHECK_FILE = "abruptness-check.json"


def _steps(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def print_checks(checks: dict[str, dict[str, Any]]) -> None:
    """One line per group: the counts, the abrupt cells' onset and width, noise, ρ and the null."""
    print("group  runs  drops  abrupt(rule)  abrupt(share)  onset [runs' range]  width  decades  "
          "noise/gap (median, p90)  rho(onset, share) [95%]  surrogates abrupt")
    for name, c in checks.items():
        rho = c["onset_share_spearman"]
        rho_text = "-" if rho is None else f"{rho[0]:+.2f} [{rho[1]:+.2f}, {rho[2]:+.2f}]"
        onset, width, decades, noise = c["onset"], c["width"], c["decades"], c["noise"]
        null = f"{c['surrogate_abrupt']}/{c['surrogates']}" if c["surrogates"] else "-"
        print(f"{name}  {c['runs']}  {c['cells_with_drop']}  {c['abrupt_by_rule']}  {c['abrupt_by_share']}  "
              f"{_steps(onset['median'])} [{_steps(onset['low'])}–{_steps(onset['high'])}]  {_steps(width['median'])}  "
              f"{'-' if decades['median'] is None else format(decades['median'], '.2f')}  "
              f"{'-' if noise['median'] is None else format(noise['median'], '.3f')}, "
              f"{'-' if noise['p90'] is None else format(noise['p90'], '.3f')}  {rho_text}  {null}")
