"""The loss curves: per leaderboard group, the train loss with the plateau shaded and the eval
accuracy beside it."""

from __future__ import annotations

import html
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from emergence_bench.measurements.emergence import EMERGENCE
from emergence_bench.measurements.plateau import PLATEAU
from emergence_bench.reporting import leaderboard
from emergence_bench.reporting.figure import REGISTRY, Drawn, Results, register_figure
from emergence_bench.reporting.plotting import (
    draw_line,
    legend_above,
    log_label,
    panel_title,
    panels,
    plain_log,
    short_titles,
)
from emergence_bench.results.row import ResultRow, emergence_step, section

MAX_CURVE_PANELS = 24  # loss-curve panels on one page: a 200-run sweep's page stays a few MB

CURVE_POINTS = 400  # points per drawn curve at most (every k-th kept)


def _thin(curves: list[np.ndarray]) -> list[np.ndarray]:
    """Each curve [N, k] with every step-th row, one step for all: the longest keeps at most
    CURVE_POINTS rows."""
    step = max(1, -(-max(len(c) for c in curves) // CURVE_POINTS))
    return [c[::step] for c in curves]


def carried_mean(curves: list[np.ndarray], column: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The mean over seeds of ``column`` of ``curves`` (each [N_i, k], column 0 the step), on the
    steps of the longest: a seed that stopped earlier (at emergence) is carried at its last value, so
    the mean runs to the last step any seed reached and never ends where the first seed stopped.
    Returns (steps [N], mean [N])."""
    steps = max(curves, key=lambda c: c[-1, 0])[:, 0]
    return steps, np.mean([np.interp(steps, c[:, 0], c[:, column]) for c in curves], axis=0)


def _mark_stops(ax: Axes, curves: list[np.ndarray], column: int, end: float) -> bool:
    """A cross where each seed's curve ended before ``end`` (the last step any seed reached); whether
    one did."""
    stopped = [c for c in curves if c[-1, 0] < end]
    if stopped:
        ax.scatter([c[-1, 0] for c in stopped], [c[-1, column] for c in stopped], marker="x", s=22,
                   color="black", linewidths=0.9, zorder=3)
    return bool(stopped)


def loss_curves(groups: list[tuple[str, list[ResultRow]]]) -> Figure | None:
    """Per group (the first MAX_CURVE_PANELS), two panels side by side: the train loss (mean and each
    seed; log axis where every mean value is above 0) with the plateau (0 → median plateau end) shaded
    and the threshold dotted, and the eval accuracy (mean and each seed) with the emergence threshold;
    emergence steps dashed on both. A seed that stopped early ends in a cross and is carried at its
    last value in the mean (``carried_mean``). One legend above the panels, on no data. None when no
    run recorded a train-loss curve. (What every panel shares is in the caption: ``short_titles``.)"""
    drawable = [(label, members) for label, members in groups
                if any(section(m, "curves").get("train_loss") for m in members)][:MAX_CURVE_PANELS]
    if not drawable:
        return None
    names, _ = short_titles([label for label, _ in groups])  # what varies over all of them
    titles = [dict(zip([label for label, _ in groups], names))[label] for label, _ in drawable]
    figure, axes = panels(2 * len(drawable), columns=4, height=2.9)
    stops = False
    for (loss_ax, accuracy_ax), title, (label, members) in zip(zip(axes[::2], axes[1::2]), titles, drawable):
        curves = _thin([np.array(m["curves"]["train_loss"]) for m in members if section(m, "curves").get("train_loss")])
        steps, mean = carried_mean(curves)
        for c in curves:
            draw_line(loss_ax, c[:, 0], c[:, 1], color="grey", alpha=0.3, linewidth=0.8)
        draw_line(loss_ax, steps, mean, color="C0", linewidth=1.8, label="mean train loss")
        stops |= _mark_stops(loss_ax, curves, 1, steps[-1])
        plateau = leaderboard.km_time(members, PLATEAU, "end_step")
        end = plateau["median"] if plateau["median"] is not None else plateau["budget"]
        loss_ax.axvspan(0, end, color="C1", alpha=0.15, label="plateau (median)")
        loss_ax.axhline(PLATEAU.read(members[0])["threshold"], color="C3", linewidth=0.9, linestyle=":",
                        label="plateau threshold")
        evals = [np.array(section(m, "curves")["eval"]) for m in members if section(m, "curves").get("eval")]
        for e in evals:
            draw_line(accuracy_ax, e[:, 0], e[:, 2], color="grey", alpha=0.3, linewidth=0.8)
        if evals:
            eval_steps, accuracy = carried_mean(evals, column=2)
            draw_line(accuracy_ax, eval_steps, accuracy, color="C2", linewidth=1.8, label="mean eval accuracy")
            stops |= _mark_stops(accuracy_ax, evals, 2, eval_steps[-1])
        threshold = EMERGENCE.read(members[0]).get("threshold")
        if threshold is not None:
            accuracy_ax.axhline(threshold, color="C3", linewidth=0.9, linestyle=":", label="emergence threshold")
        for m in members:
            step = emergence_step(m)
            for ax in (loss_ax, accuracy_ax) if step is not None else ():
                ax.axvline(step, color="C2", linestyle="--", linewidth=0.9)
        if np.all(mean > 0):
            plain_log(loss_ax)
        loss_ax.set_xlim(left=0)
        accuracy_ax.set_xlim(loss_ax.get_xlim())  # one step axis for both: a one-eval run is a dot, not a void
        accuracy_ax.set_ylim(-0.02, 1.02)
        panel_title(loss_ax, title, width=30)
        loss_ax.set_xlabel("step")
        log_label(loss_ax, "train loss")
        accuracy_ax.set_xlabel("step")
        accuracy_ax.set_ylabel("eval accuracy")
    figure.tight_layout()
    handles, labels = _legend_entries(axes[:2], stops)
    legend_above(figure, handles, labels, columns=4)
    return figure


def _legend_entries(axes: list[Axes], stops: bool) -> tuple[list[Any], list[str]]:
    """The first panel pair's labelled lines, and the unlabelled marks every panel has (each seed, each
    seed's emergence step, a stopped seed's cross)."""
    handles: list[Any] = []
    labels: list[str] = []
    for ax in axes:
        axis_handles, axis_labels = ax.get_legend_handles_labels()
        handles, labels = handles + axis_handles, labels + axis_labels
    handles += [Line2D([], [], color="grey", alpha=0.5, linewidth=0.8),
                Line2D([], [], color="C2", linestyle="--", linewidth=0.9)]
    labels += ["each seed", "a seed's emergence step"]
    if stops:
        handles.append(Line2D([], [], color="black", marker="x", linestyle="none"))
        labels.append("a seed stopped (carried at its last value in the mean)")
    return handles, labels


@register_figure("curves", "Loss curves, and accuracy beside them",
                 "Per group, left: the train loss, on a log axis where every mean value is above 0 (blue: the mean; "
                 "grey: each seed), shaded up to the median plateau end, dotted: the plateau threshold; right: the "
                 "eval accuracy (green: the mean), dotted: the emergence threshold; dashed on both: each seed's "
                 "emergence step. A cross marks where a seed stopped before the others (a run that ends at "
                 "emergence); the mean carries that seed at its last value, so it runs as long as the longest seed. "
                 "The legend above applies to every panel. ",
                 "no run recorded a train-loss curve")
def _curves(results: Results) -> list[Drawn]:
    figure = loss_curves(results.groups)
    if figure is None:
        return []
    groups, shown = results.groups, min(len(results.groups), MAX_CURVE_PANELS)
    caption = (REGISTRY["curves"].caption + html.escape(short_titles([label for label, _ in groups])[1])
               + (f" The first {shown} of {len(groups)} groups (the leaderboard's order); `report DIR/<group>` "
                  "shows the others." if len(groups) > shown else ""))
    return [Drawn(figure, "loss-curves", caption=caption)]
