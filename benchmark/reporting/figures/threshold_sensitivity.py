"""Threshold sensitivity: the median emergence step and first loss drop against the thresholds that
define them (computed by ``emergence_bench.reporting.thresholds``)."""

from __future__ import annotations

import html
import textwrap
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from emergence_bench.reporting.figure import Drawn, Results, register_figure
from emergence_bench.reporting.plotting import PAGE_INCHES, legend_above, log_label, plain_log, plt
from emergence_bench.reporting.thresholds import ACCURACY_FRACTIONS, LOSS_FRACTIONS, sensitivity, used_thresholds
from emergence_bench.results.row import Row, section

MAX_LINES = 10  # lines in one panel that can still be told apart


def with_curves(groups: Sequence[tuple[str, Sequence[Row]]]) -> list[tuple[str, Sequence[Row]]]:
    """The groups whose runs recorded eval curves: those the figure can draw."""
    return [(label, rows) for label, rows in groups if any(section(r, "curves").get("eval") for r in rows)]


def threshold_figure(groups: Sequence[tuple[str, Sequence[Row]]], limit: int = MAX_LINES) -> Figure | None:
    """Two panels, one line per group (the first ``limit`` with curves): median emergence step against τ
    and median first loss drop against f, the thresholds in use dashed. None when no run has curves."""
    groups = with_curves(groups)
    if not groups:
        return None
    groups = groups[:limit]
    found = sensitivity(groups)
    figure, (left, right) = plt.subplots(1, 2, figsize=(PAGE_INCHES, 4.0))
    for label, _ in groups:
        left.plot(ACCURACY_FRACTIONS, found[label]["emergence"], marker="o", label=label)
        right.plot(LOSS_FRACTIONS, found[label]["plateau"], marker="o", label=label)
    tau, frac = used_thresholds(groups[0][1])
    for ax, used, xlabel, title in (
            (left, tau, "τ (× reachable accuracy)", "Emergence step"),
            (right, frac, "f (of the way from chance to floor)", "First loss drop")):
        if used is not None:
            ax.axvline(used, color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel(xlabel)
        ax.set_title(title)
        values = np.array([v for label, _ in groups for v in found[label]["emergence" if ax is left else "plateau"]])
        if np.isfinite(values).any() and np.nanmin(values) > 0:
            plain_log(ax, "y")
        log_label(ax, f"{title.lower()}, median over seeds")
        ax.grid(alpha=0.3)
    figure.tight_layout()
    # One line per group above both panels: the labels name every key that differs and can be long,
    # and beside a panel they squeezed it.
    handles, labels = left.get_legend_handles_labels()
    legend_above(figure, handles, [textwrap.shorten(label, 150) for label in labels], columns=1)
    return figure


CAPTION = ("Left: each group's median emergence step (Kaplan–Meier over seeds) against the accuracy threshold τ, "
           "as a fraction of the task's reachable accuracy; right: its median first loss drop against the loss "
           "threshold, the fraction f of the way from chance (or the shortcut baseline) to the floor. Dashed: the "
           "thresholds the runs used. A conclusion that holds along the whole curve does not depend on the "
           "threshold; a missing point is a median not reached (runs that stopped at their emergence are "
           "censored there for a higher τ). The first-drop curve reads the recorded train-loss means, not the "
           "callback's EMA, so at its own f it can differ from the leaderboard by a few steps. (The held "
           "plateau's end has no threshold of this kind: its bands are fixed, docs/measurements.md.)")


@register_figure("thresholds", "Threshold sensitivity", CAPTION, "no run recorded eval curves")
def _thresholds(results: Results) -> list[Drawn]:
    figure = threshold_figure(results.groups)
    if figure is None:
        return []
    groups = with_curves(results.groups)
    left_out = [results.titles.get(label) or label for label, _ in groups[MAX_LINES:]]
    said = (f" Drawn: the first {MAX_LINES} of the {len(groups)} groups with eval curves, in the leaderboard's "
            f"order (more lines cannot be told apart); left out: {html.escape('; '.join(left_out))}."
            if left_out else "")
    return [Drawn(figure, "threshold-sensitivity", caption=CAPTION + said)]
