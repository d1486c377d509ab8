"""The final eval loss over two numeric sweep axes, as a heatmap."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from emergence_bench.reporting import leaderboard
from emergence_bench.reporting.figure import Drawn, Results, register_figure
from emergence_bench.reporting.plotting import PAGE_INCHES, plt
from emergence_bench.results.row import ResultRow, section


def heatmap(records: list[ResultRow], axes: tuple[str, str] | None) -> tuple[Figure | None, tuple[str, str] | None]:
    """Mean final eval loss over two config axes (the first two numeric axes that vary, unless given)."""
    measured = [r for r in records if r["status"] in ("ok", "diverged")
                and section(r, "metrics").get("final_eval_loss") is not None]
    if not measured:
        return None, None
    flats = pd.DataFrame([leaderboard.flatten(r["config"]) for r in measured])
    for axis in axes or ():
        if axis not in flats.columns:
            raise ValueError(f"no config key {axis!r} in these results; keys: {', '.join(sorted(flats.columns))}")
    axes = axes or _varying_pair(flats)
    if axes is None:
        return None, None
    flats["loss"] = [section(r, "metrics")["final_eval_loss"] for r in measured]
    grid = flats.dropna(subset=list(axes)).groupby(list(axes))["loss"].mean().unstack()
    figure, ax = plt.subplots(figsize=(min(PAGE_INCHES, 2.5 + 0.8 * grid.shape[1]), 1.5 + 0.5 * grid.shape[0]))
    image = ax.imshow(grid.values, cmap="viridis", aspect="auto")
    ax.set_xticks(range(grid.shape[1]), [_key(c) for c in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [_key(i) for i in grid.index])
    ax.set_xlabel(axes[1])
    ax.set_ylabel(axes[0])
    for (i, j), value in np.ndenumerate(grid.values):
        if not np.isnan(value):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", color="white", fontsize=9)
    figure.colorbar(image, ax=ax, label="final eval loss")
    return figure, axes


def _varying_pair(flats: pd.DataFrame) -> tuple[str, str] | None:
    """The first two numeric config keys (seed aside) that each take two or more values among the runs
    that have both, and more pairs of values than either has values: two keys varied against each
    other, not two families' settings (state size 8 with 4 steps, 10 with 2) drawn as a diagonal."""
    numeric = [k for k in flats.columns if k != "seed" and pd.api.types.is_numeric_dtype(flats[k])
               and not pd.api.types.is_bool_dtype(flats[k]) and flats[k].nunique() > 1]
    for i, first in enumerate(numeric):
        for second in numeric[i + 1:]:
            both = flats[[first, second]].dropna()
            pairs = len(both.drop_duplicates())
            if both[first].nunique() > 1 and both[second].nunique() > 1 and pairs > max(both.nunique()):
                return first, second  # not one value of each per family: a diagonal, not a grid
    return None


def _key(value: object) -> str:
    """A config value as a tick label: 3, not 3.0 (a column with gaps is float in pandas)."""
    return f"{value:g}" if isinstance(value, float) and value.is_integer() else str(value)


@register_figure("heatmap", "Final eval loss over two sweep axes",
                 "The mean over seeds of each cell's final eval loss: darker is lower.",
                 "no two numeric config keys each take two or more values among the same runs (or --axes names them)")
def _heatmap(results: Results) -> list[Drawn]:
    figure, used = heatmap(results.records, results.axes)
    return [Drawn(figure, "heatmap", title=f"Final eval loss over {used[0]} × {used[1]}")] if figure and used else []
