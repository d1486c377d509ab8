"""The loss curves: per leaderboard group, the train loss with the plateau shaded and the eval
accuracy beside it."""

from __future__ import annotations

from emergence_bench.callbacks.plateau import PLATEAU

from emergence_bench.callbacks.emergence import EMERGENCE
import html

import numpy as np
from matplotlib.figure import Figure

from emergence_bench.reporting import leaderboard
from emergence_bench.reporting.figure import REGISTRY, Drawn, Results, register_figure
from emergence_bench.reporting.plotting import draw_line, panel_title, panels, plain_log, short_titles
from emergence_bench.result_row import ResultRow, emergence_step, section


MAX_CURVE_PANELS = 24  # loss-curve panels on one page: a 200-run sweep's page stays a few MB

CURVE_POINTS = 400  # points per drawn curve at most (every k-th kept)


def _thin(curves: list[np.ndarray]) -> list[np.ndarray]:
    """Each curve [N, 2] with every k-th row, one k for all so their rows stay aligned: the longest
    keeps at most CURVE_POINTS rows."""
    step = max(1, -(-max(len(c) for c in curves) // CURVE_POINTS))
    return [c[::step] for c in curves]


def loss_curves(groups: list[tuple[str, list[ResultRow]]]) -> Figure | None:
    """Per group (the first MAX_CURVE_PANELS), two panels side by side: the train loss on a log axis
    (mean and each seed) with the plateau (0 → median plateau end) shaded and the threshold dotted, and
    the eval accuracy (mean and each seed) with the emergence threshold; emergence steps dashed on
    both. None when no run recorded a train-loss curve. (What every panel shares is in the caption:
    ``short_titles``.)"""
    drawable = [(label, members) for label, members in groups
                if any(section(m, "curves").get("train_loss") for m in members)][:MAX_CURVE_PANELS]
    if not drawable:
        return None
    names, _ = short_titles([label for label, _ in groups])  # what varies over all of them
    titles = [dict(zip([label for label, _ in groups], names))[label] for label, _ in drawable]
    figure, axes = panels(2 * len(drawable), columns=4, height=2.9)
    for (loss_ax, accuracy_ax), title, (label, members) in zip(zip(axes[::2], axes[1::2]), titles, drawable):
        curves = _thin([np.array(m["curves"]["train_loss"]) for m in members if section(m, "curves").get("train_loss")])
        length = min(len(c) for c in curves)
        mean = np.mean([c[:length, 1] for c in curves], axis=0)
        for c in curves:
            draw_line(loss_ax, c[:, 0], c[:, 1], color="grey", alpha=0.3, linewidth=0.8)
        draw_line(loss_ax, curves[0][:length, 0], mean, color="C0", linewidth=1.8, label=f"mean of {len(curves)}")
        plateau = leaderboard.km_time(members, PLATEAU, "end_step")
        end = plateau["median"] if plateau["median"] is not None else plateau["budget"]
        loss_ax.axvspan(0, end, color="C1", alpha=0.15, label="plateau (median)")
        loss_ax.axhline(members[0]["plateau"]["threshold"], color="C3", linewidth=0.9, linestyle=":", label="threshold")
        evals = [np.array(m["curves"]["eval"]) for m in members if len(section(m, "curves").get("eval") or [])]
        for e in evals:
            draw_line(accuracy_ax, e[:, 0], e[:, 2], color="grey", alpha=0.3, linewidth=0.8)
        if evals:
            length = min(len(e) for e in evals)
            draw_line(accuracy_ax, evals[0][:length, 0], np.mean([e[:length, 2] for e in evals], axis=0), color="C2",
                  linewidth=1.8, label="mean eval accuracy")
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
        loss_ax.set_ylabel("train loss (log)")
        accuracy_ax.set_xlabel("step")
        accuracy_ax.set_ylabel("eval accuracy")
    axes[0].legend(loc="lower left")
    axes[1].legend(loc="upper left")
    figure.tight_layout()
    return figure


@register_figure("curves", "Loss curves, and accuracy beside them",
                 "Per group, left: the train loss on a log axis (blue: the mean; grey: each seed), shaded up to the "
                 "median plateau end, dotted: the plateau threshold; right: the eval accuracy (green: the mean), "
                 "dotted: the emergence threshold; dashed on both: each seed's emergence step. ",
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
