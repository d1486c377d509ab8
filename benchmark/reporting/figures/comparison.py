"""The ranking's comparison figures: mixers side by side on one axis.

- ``survival_figure``: per rung, the Kaplan–Meier curves of "not yet emerged" and "still on its
  plateau" (the held plateau, ``emergence_bench.results.row_curves.plateau_time``) against step, one line
  per mixer, a tick where a run was censored (stopped or out of budget before the event).
- ``forest_figure``: each mixer's plateau ratio to the baseline (the geometric mean over cells, with
  its 95% interval), and every cell's ratio behind it.
- ``state_figure``: the success score and the plateau ratio against the state a mixer carries per
  sequence at inference: the quality-for-memory trade-off of a recurrent architecture.

Each takes ``rank.build``'s output (and the records where it needs the runs) and returns a matplotlib
Figure, or None where the results do not allow it.
"""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from emergence_bench.reporting import rank  # noqa: E402
from emergence_bench.reporting.plotting import PAGE_INCHES, legend_above, plain_log  # noqa: E402
from emergence_bench.results.row import ResultRow, emergence_step, step_budget  # noqa: E402
from emergence_bench.results.row_curves import plateau_time  # noqa: E402
from emergence_bench.stats.medians import kaplan_meier  # noqa: E402


def _colours(mixers: list[str]) -> dict[str, str]:
    return {mixer: f"C{i % 10}" for i, mixer in enumerate(sorted(mixers))}


def _emergence(record: ResultRow) -> tuple[float, bool]:
    step = emergence_step(record)
    if step is not None:
        return float(step), False
    return float(step_budget(record)), True


def _km_line(ax: Axes, sample: list[tuple[float, bool]], colour: str, label: str) -> None:
    """One Kaplan–Meier step curve from (0, 1), with a tick at each censored time."""
    times, censored = [t for t, _ in sample], [c for _, c in sample]
    xs, ys, survival = [0.0], [1.0], 1.0
    for time, after, _ in kaplan_meier(times, censored):
        xs += [time, time]
        ys += [survival, after]
        survival = after
    end = max(times)
    xs.append(end)
    ys.append(survival)
    ax.plot(xs, ys, color=colour, label=label, linewidth=1.4)
    marks = sorted(t for t, c in sample if c)
    if marks:
        level = [_survival_at(xs, ys, t) for t in marks]
        ax.scatter(marks, level, marker="|", s=60, color=colour, zorder=3)


def _survival_at(xs: list[float], ys: list[float], time: float) -> float:
    """The step curve's value just after ``time`` (xs, ys as _km_line draws them)."""
    value = ys[0]
    for x, y in zip(xs, ys):
        if x <= time:
            value = y
    return value


def survival_figure(ranked: dict, records: list[ResultRow]) -> Figure | None:
    """Rows: each family's "not yet emerged" then "still on its plateau"; columns: its rungs."""
    ladder = ranked["ladders"]
    members = rank.cell_members([r for r in records if r["status"] in ("ok", "diverged")], ladder)
    if not members:
        return None
    families = sorted(ladder)
    columns = max(len(ladder[f]["rungs"]) for f in families)
    colours = _colours(sorted({m for m, _, _ in members}))
    figure, axes = plt.subplots(2 * len(families), columns, figsize=(PAGE_INCHES, 2.6 * 2 * len(families)),
                                squeeze=False, sharey=True)
    for row, family in enumerate(families):
        for column in range(columns):
            for kind, ax in enumerate((axes[2 * row, column], axes[2 * row + 1, column])):
                if column >= len(ladder[family]["rungs"]):
                    ax.axis("off")
                    continue
                rung = ladder[family]["rungs"][column]
                for (mixer, fam, key), runs in sorted(members.items()):
                    if fam == family and key == json.dumps(rung):
                        sample = [t for r in runs if (t := (_emergence if kind == 0 else plateau_time)(r)) is not None]
                        if sample:  # a run without a train-loss curve (a slim reference row) has no plateau
                            _km_line(ax, sample, colours[mixer], mixer)
                what = "not yet emerged" if kind == 0 else "still on its plateau"
                axis = (ladder[family]["axis"] or "").removeprefix("task.")
                ax.set_title(f"{family} {axis}={rung}: {what}", fontsize=9)
                ax.set_ylim(-0.03, 1.03)
                ax.grid(alpha=0.3)
                if column == 0:
                    ax.set_ylabel("fraction of seeds")
                if row == len(families) - 1 and kind == 1:
                    ax.set_xlabel("training step")
    handles = [plt.Line2D([], [], color=c, label=m) for m, c in colours.items()]
    figure.legend(handles=handles, loc="upper center", ncol=min(len(handles), 7), fontsize=9,
                  bbox_to_anchor=(0.5, 1.0))
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.45 / figure.get_figheight()))  # room for the legend
    return figure


def forest_figure(ranked: dict) -> Figure | None:
    """Each mixer's plateau ratio to the baseline: the geometric mean (square) with its 95% interval,
    every cell's ratio (dots; open where it is a bound) behind it; a line at 1."""
    baseline, plateau, ranking = ranked.get("baseline"), ranked.get("held_plateau"), ranked["ranking"]
    if baseline is None or plateau is None or not len(plateau) or "held_plateau_ratio" not in ranking:
        return None
    rows = ranking[(ranking["mixer"] != baseline) & ranking["held_plateau_ratio"].notna()]
    rows = rows.sort_values("held_plateau_ratio", ascending=False)
    if rows.empty:
        return None
    figure, ax = plt.subplots(figsize=(10, 0.55 * len(rows) + 1.6))
    colours = _colours(list(ranking["mixer"]))
    for y, row in enumerate(rows.itertuples()):
        cells = plateau[(plateau["mixer"] == row.mixer) & plateau["informative"]]
        jitter = np.linspace(-0.18, 0.18, len(cells)) if len(cells) > 1 else np.zeros(len(cells))
        for dy, cell in zip(jitter, cells.itertuples()):
            ax.scatter(cell.ratio, y + dy, s=18, color=colours[row.mixer], alpha=0.45,
                       facecolors="none" if cell.bound else colours[row.mixer])
        ax.plot([row.held_plateau_low, row.held_plateau_high], [y, y], color="black", linewidth=2)
        ax.scatter(row.held_plateau_ratio, y, marker="s", s=60, color="black", zorder=3)
    ax.axvline(1, color="grey", linestyle="--", linewidth=1)
    plain_log(ax, "x")
    ax.set_yticks(range(len(rows)), list(rows["mixer"]))
    ax.invert_yaxis()
    ax.set_xlabel(f"median plateau end over {baseline}'s (log; < 1: a shorter plateau)")
    ax.grid(axis="x", alpha=0.3)
    figure.tight_layout()
    return figure


MARKERS = "osD^vP*Xph<>"  # one per mixer with its colour: told apart in the legend without labels on the data


def unknown_state(ranked: dict) -> list[str]:
    """The ranked mixers whose runs do not state the state they carry (a plugin whose mixer has no
    ``state_size``): the state figure draws them apart, and its caption names them."""
    ranking = ranked["ranking"]
    return sorted(ranking.loc[ranking["state_size"].isna(), "mixer"]) if "state_size" in ranking else []


def state_figure(ranked: dict) -> Figure | None:
    """Success score (left) and plateau ratio (right) against the state per sequence (log x), one marker
    and colour per mixer, named in the legend above (labels beside the points overlapped and ran off
    the edge); a mixer of unknown state is a dashed line at its value across the panel. None where
    fewer than two mixers state theirs."""
    ranking = ranked["ranking"]
    if "state_size" not in ranking or ranking["state_size"].notna().sum() < 2:
        return None
    has_plateau = "held_plateau_ratio" in ranking and ranking["held_plateau_ratio"].notna().sum() >= 2
    figure, axes = plt.subplots(1, 2 if has_plateau else 1, figsize=(PAGE_INCHES if has_plateau else 6.5, 4.2),
                                squeeze=False)
    colours = _colours(list(ranking["mixer"]))
    markers = {mixer: MARKERS[i % len(MARKERS)] for i, mixer in enumerate(sorted(ranking["mixer"]))}
    unknown = set(unknown_state(ranked))
    panels: list[tuple[Axes, str, tuple[str, str] | None, str]] = [
        (axes[0, 0], "score", None, "success score (mean area, ±95%)")]
    if has_plateau:
        panels.append((axes[0, 1], "held_plateau_ratio", ("held_plateau_low", "held_plateau_high"),
                       f"plateau ratio to {ranked['baseline']} (log)"))
    for ax, column, interval, label in panels:
        for row in ranking.itertuples():
            value = getattr(row, column)
            if value is None or value != value:  # no value here (NaN): nothing to draw
                continue
            if interval:
                error = [[value - getattr(row, interval[0])], [getattr(row, interval[1]) - value]]
            else:
                error = [[1.96 * row.score_se], [1.96 * row.score_se]]
            if row.mixer in unknown:  # no x to draw it at: its value across the panel
                ax.axhline(value, color=colours[row.mixer], linestyle="--", linewidth=1.2)
                continue
            ax.errorbar(row.state_size, value, yerr=error, marker=markers[row.mixer], capsize=3,
                        color=colours[row.mixer], linestyle="none")
        plain_log(ax, "x")
        ax.margins(x=0.12)  # the first and last points' caps inside the panel
        ax.set_xlabel("state carried per sequence at inference (numbers, log)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0, 0].set_ylim(-0.05, 1.1)
    if has_plateau:
        plain_log(axes[0, 1])
        axes[0, 1].axhline(1, color="grey", linestyle=":", linewidth=1)
    figure.tight_layout()
    handles = [plt.Line2D([], [], color=colours[m], linestyle="--") if m in unknown else
               plt.Line2D([], [], color=colours[m], marker=markers[m], linestyle="none")
               for m in sorted(ranking["mixer"])]
    labels = [f"{m} (state unknown)" if m in unknown else m for m in sorted(ranking["mixer"])]
    legend_above(figure, handles, labels, columns=min(len(labels), 5 if has_plateau else 3))
    return figure
