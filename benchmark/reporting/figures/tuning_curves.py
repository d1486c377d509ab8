"""The tuning curves: per task family, success area against learning rate, one line per mixer, with
95% Wilson intervals and the chosen lr marked, from the tuning tables (execution/tuning.py). Where no
lr made a tuning run emerge, the choice is the tie-break's, not an optimum: it is drawn as a cross and
the panel's title says "none works" for those mixers (above the data, never on it). A pruned point
(stopped once the rule could no longer choose it, execution/pruning.py) is drawn hollow: its area is
what it had reached by then. The figure is the page's width (four panels a row)."""

from __future__ import annotations

import math
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from emergence_bench.reporting.plotting import PAGE_INCHES, legend_below  # noqa: E402
from emergence_bench.results.store import none_works  # noqa: E402

KEY = "optim.lr"


def tuning_figure(tables: list[dict]) -> Figure | None:
    """One panel per family (the tables' groups), x: lr (log), y: success area on the tuning rung(s)
    with its interval; a filled marker at each mixer's choice, a ring where the choice is on an edge
    of the grid, a cross where no value works. None without a table over ``optim.lr``."""
    tables = [t for t in tables if KEY in t["grid"] and len(t["grid"][KEY]) > 1]
    if not tables:
        return None
    groups = sorted({t["group"] for t in tables})
    pruned_any = False
    mixers = sorted({t["mixer"] for t in tables})
    colours = {m: f"C{i % 10}" for i, m in enumerate(mixers)}  # the ranking figures' colours
    columns = min(4, len(groups))
    rows = -(-len(groups) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(PAGE_INCHES, 3.1 * rows + 0.6), squeeze=False,
                                sharey=True)
    for ax, group in zip(axes.flat, groups):
        failing = []  # the mixers none of whose lrs works here, named in the title
        for i, table in enumerate(sorted((t for t in tables if t["group"] == group), key=lambda t: t["mixer"])):
            points = sorted((p for p in table["points"] if p["area"] is not None), key=lambda p: p["values"][KEY])
            if not points:
                continue
            # A sideways offset per mixer (×0.84 to ×1.19), so equal areas (common with few seeds) stay
            # apart; the grid's values are ×3 or more apart.
            shift = math.exp(0.35 * (i - (len(mixers) - 1) / 2) / max(1, len(mixers) - 1))
            x = [p["values"][KEY] * shift for p in points]
            y = [p["area"] for p in points]
            errors = [[a - p["area_low"] for a, p in zip(y, points)], [p["area_high"] - a for a, p in zip(y, points)]]
            colour = colours[table["mixer"]]
            nothing = none_works(table)
            bars = ax.errorbar(x, y, yerr=errors, color=colour, marker="o", markersize=3, linewidth=1.2, capsize=0,
                               elinewidth=0.8, label=table["mixer"])
            for line in bars[2]:
                line.set_alpha(0.4)
            stopped = [(xi, p["area"]) for xi, p in zip(x, points) if p.get("pruned")]
            if stopped:
                ax.plot(*zip(*stopped), linestyle="none", marker="o", markersize=4.5, color=colour,
                        markerfacecolor="white", zorder=3)  # above the errorbar's own filled marker
                pruned_any = True
            chosen = next(p for p in points if p["values"] == table["chosen"])
            ax.plot([chosen["values"][KEY] * shift], [chosen["area"]], marker="x" if nothing else "o", markersize=8,
                    color=colour, markerfacecolor=colour if not table.get("edge") else "white", markeredgewidth=1.5)
            if nothing:
                failing.append(table["mixer"])
        rungs = next(t for t in tables if t["group"] == group)
        title = f"{group} ({rungs['rung_axis'].removeprefix('task.')} = {', '.join(map(str, rungs['rungs']))})"
        # In the title, not on the panel: the crosses sit at 0 where these labels covered them.
        if failing:
            title += "\n" + "\n".join(textwrap.wrap(f"none works (×): {', '.join(failing)}", 40))
        ax.set_title(title, fontsize=9)
        ax.set_xscale("log")
        values = sorted({p["values"][KEY] for t in tables if t["group"] == group for p in t["points"]})
        ax.set_xticks(values, [f"{v:.0e}".replace("e-0", "e-") for v in values], fontsize=8)
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        ax.set_xlabel("learning rate")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("success area")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if pruned_any:  # one key for every mixer's hollow markers
        handles.append(Line2D([], [], linestyle="none", marker="o", markersize=4, color="0.35",
                              markerfacecolor="white"))
        labels.append("pruned: stopped once it could not be chosen (its area by then)")
    figure.tight_layout()
    legend_below(figure, handles, labels, columns=min(len(labels), 5))  # five a row fit the page's width
    return figure
