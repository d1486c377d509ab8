"""The staircase: each output cell's eval loss over training, for one seed per group."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from emergence_bench.measurements.emergence import EMERGENCE
from emergence_bench.reporting.figure import Drawn, Results, register_figure
from emergence_bench.reporting.plotting import (
    draw_line,
    legend_above,
    log_label,
    panel_title,
    panels,
    plain_log,
    plt,
    short_titles,
)
from emergence_bench.results.row import ResultRow, emergence_step, section


def staircase_seed(members: list[ResultRow], seed: int | None = None) -> ResultRow | None:
    """The seed a group's staircase and filmstrip show: ``seed`` when given, else the one with the
    median emergence step among those that emerged (the earlier of two middle ones), else the
    first; None when no such seed kept per-cell curves."""
    kept = [m for m in members if section(m, "curves").get("eval_cells")]
    if seed is not None:
        return next((m for m in kept if m["seed"] == seed), None)
    emerged = sorted(((step, m) for m in kept if (step := emergence_step(m)) is not None), key=lambda pair: pair[0])
    return emerged[(len(emerged) - 1) // 2][1] if emerged else (kept[0] if kept else None)


def staircase(groups: list[tuple[str, list[ResultRow]]], limit: int, seed: int | None = None) -> Figure | None:
    """Per group (up to ``limit``): each output cell's eval loss over training for the group's
    median-emergence seed, one line per cell, a dot where that cell emerged; a log axis where every
    loss is above 0 (labelled so only then). Capabilities arriving one cell at a time show as a
    staircase."""
    shown = [(label, chosen) for label, members in groups
             if (chosen := staircase_seed(members, seed)) is not None][:limit]
    if not shown:
        return None
    names = dict(zip([label for label, _ in groups], short_titles([label for label, _ in groups])[0]))
    titles = [names[label] for label, _ in shown]
    figure, axes = panels(len(shown))
    shortcuts = False
    for ax, title, (label, record) in zip(axes, titles, shown):
        steps = np.array([step for step, _ in record["curves"]["eval_cells"]])
        losses = np.array([cells for _, cells in record["curves"]["eval_cells"]])  # [evals, cells]
        cells = losses.shape[1]
        emerged_at = EMERGENCE.read(record).get("per_position") or [None] * cells
        shortcut = section(record, "task_facts").get("shortcut_cells") or [False] * cells
        colours = plt.cm.viridis(np.linspace(0, 0.9, cells))
        for c in range(cells):
            dashed = c < len(shortcut) and shortcut[c]
            draw_line(ax, steps, losses[:, c], color=colours[c], linewidth=1.2 if dashed else 1,
                  linestyle="--" if dashed else "-")
            at = emerged_at[c] if c < len(emerged_at) else None
            if at is not None and at in steps:
                ax.scatter([at], [losses[list(steps).index(at), c]], color=colours[c], s=16, zorder=3)
        shortcuts |= any(shortcut)
        if np.all(losses > 0):
            plain_log(ax)
        ax.set_xlim(0, max(float(steps.max()), 1.0) * 1.05)
        panel_title(ax, f"{title + ', ' if title else ''}seed {record['seed']}", width=44)
        ax.set_xlabel("step")
        log_label(ax, "eval loss per cell")
    figure.tight_layout()
    if shortcuts:  # above the panels: a legend inside one would cover the drop it explains
        legend_above(figure, [Line2D([], [], color="grey", linestyle="--"), Line2D([], [], color="grey")],
                     ["shortcut cell", "pattern cell"])
    return figure


CAPTION = ("Each output cell's eval loss over training, one line per cell, for each group's median-emergence "
           "seed (a log axis where every loss is above 0, and then its label says so); a dot where that cell "
           "emerged; dashed: a shortcut cell, predictable from earlier outputs without the sparse pattern. "
           "Cells that drop one after another are capabilities arriving one at a time.")


@register_figure("staircase", "Per-cell eval loss (the staircase)", CAPTION,
                 "no run kept its per-cell eval losses (curves.eval_cells: results from an older version)")
def _staircase(results: Results) -> list[Drawn]:
    limit = max(1, results.maps)
    figure = staircase(results.groups, limit=limit, seed=results.seed)
    if figure is None:
        return []
    kept = sum(staircase_seed(members, results.seed) is not None for _, members in results.groups)
    left_out = (f" Drawn: the first {limit} of the {kept} groups with per-cell curves, in the leaderboard's order "
                f"(the report's --maps N sets how many; --maps {kept} draws every one).") if kept > limit else ""
    return [Drawn(figure, "staircase", caption=CAPTION + left_out)]
