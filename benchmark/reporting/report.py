"""`emergence-bench report DIR`: one self-contained HTML file of a finished (or running) sweep.

Sections, each listed in an index at the top and each figure with a line on how to read it: the
leaderboard; mean train-loss curves per leaderboard row with the plateau shaded and each seed's
emergence step marked; the emergence step of each seed per leaderboard row (never-emerged seeds drawn
at their budget); the ranking where the results hold a difficulty ladder (success and plateau vs rung
per mixer); plateau and emergence medians against each numeric sweep axis; a heatmap of final eval
loss over two sweep axes; attention maps beside the ground truth. Every figure is a PNG embedded in
the page, so the file can be mailed or archived alone, and is also written as PNG and SVG files.
"""

from __future__ import annotations

import base64
import functools
import html
import io
import json
import re
import textwrap
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from emergence_bench.config import ConfigError, scientific  # noqa: E402
from emergence_bench.reporting import comparison, leaderboard, rank  # noqa: E402
from emergence_bench.execution.tuning import read_tables  # noqa: E402
from emergence_bench.reporting.thresholds import threshold_figure  # noqa: E402
from emergence_bench.reporting.tuning_curves import tuning_figure  # noqa: E402
from emergence_bench.reporting.table import Table  # noqa: E402
from emergence_bench.result_row import ResultRow, emergence_step, section, step_budget  # noqa: E402
from emergence_bench.results import (MAPS_FILE, REPORT_FILE, RESULT_FILE, TUNING_DIR, code_version, load_records,  # noqa: E402
                                     mixed_code_note, write_atomic, write_text)

# Every figure is drawn at the page's width (PAGE_INCHES at DPI: 1200 pixels, the page's max-width), so
# it is shown at 100% and its text at the sizes below is readable without zooming.
DPI, PAGE_INCHES = 96, 12.5
STYLE = {"font.size": 10, "axes.titlesize": 10.5, "axes.labelsize": 10, "xtick.labelsize": 9, "ytick.labelsize": 9,
         "legend.fontsize": 9, "figure.titlesize": 11}
plt.style.use(STYLE)  # this module only draws reports (and runs headless: Agg above)


class Page:
    """The report being written: its sections, each an <h2> the index at the top links to, and its
    figures, each embedded in the page as a PNG and, with ``folder``, also written there as
    ``<name>.png`` and ``<name>.svg`` to go straight into a paper."""

    def __init__(self, folder: Path | None = None):
        self.folder = folder
        self.parts: list[str] = []
        self.sections: list[tuple[str, str]] = []  # (anchor, title)
        self.missing: list[tuple[str, str]] = []  # (figure, why it is not drawn)

    def absent(self, name: str, reason: str) -> None:
        """A figure the results do not allow: listed under the index with the reason."""
        self.missing.append((name, reason))

    def add(self, *parts: str) -> None:
        self.parts += parts

    def section(self, title: str, caption: str | None = None) -> None:
        """A section heading, with the one line that says what its figure shows and how to read it."""
        anchor = f"section-{len(self.sections) + 1}"
        self.sections.append((anchor, title))
        self.parts.append(f'<h2 id="{anchor}">{html.escape(title)}</h2>' + (f"<p>{caption}</p>" if caption else ""))

    def figure(self, figure: Figure, name: str, alt: str) -> None:
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
        if self.folder is not None:
            write_atomic(self.folder / f"{name}.png", lambda f: f.write(buffer.getvalue()))
            write_atomic(self.folder / f"{name}.svg", lambda f: figure.savefig(f, format="svg", bbox_inches="tight"))
        plt.close(figure)
        data = base64.b64encode(buffer.getvalue()).decode()
        self.parts.append(f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">')

    def html(self, title: str) -> str:
        index = "".join(f'<li><a href="#{anchor}">{html.escape(t)}</a></li>' for anchor, t in self.sections)
        return ("<!doctype html><html><head><meta charset='utf-8'><title>emergence-bench report</title>"
                "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
                "table{border-collapse:collapse;font-size:12px;display:block;overflow-x:auto;max-width:100%}"
                "td,th{border:1px solid #ccc;padding:3px 6px}"
                "img{max-width:100%;height:auto;display:block;margin:1em 0}nav ul{columns:2}"
                ".caption{color:#444;font-size:13px}</style></head><body>"
                f"<h1>{html.escape(title)}</h1>"
                + (f"<nav><b>Contents</b><ul>{index}</ul></nav>" if index else "")
                + ("<p><b>Not drawn</b> (the data these results hold does not allow it):</p><ul>"
                   + "".join(f"<li>{html.escape(name)}: {html.escape(why)}</li>" for name, why in self.missing)
                   + "</ul>" if self.missing else "")
                + "\n".join(self.parts) + "</body></html>")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80] or "figure"


def _groups(records: list[ResultRow], table: pd.DataFrame, over: tuple[str, ...]) -> list[tuple[str, list[ResultRow]]]:
    """(row label, member records) per leaderboard row, in the table's order."""
    labels: dict[str, list[ResultRow]] = {}
    for record in records:
        key = leaderboard.group_key(record, over)
        labels.setdefault(key, []).append(record)
    rows = []
    for row in table.to_dict("records"):
        rows.append((leaderboard.row_label(row), labels[row["_key"]]))
    return rows


def _panels(n: int, columns: int = 3, height: float = 3.2):
    """A grid of ``n`` panels, ``columns`` a row, at the page's width: (figure, the n axes in order);
    the grid's spare cells hidden."""
    columns = min(columns, n)
    rows = (n + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(PAGE_INCHES, height * rows), squeeze=False)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return figure, list(axes.flat)[:n]


def short_titles(labels: list[str]) -> tuple[list[str], str]:
    """Panel titles that name only what varies between ``labels`` (leaderboard row labels, "task
    params · mixer params · setting · intervention"), and a caption with the rest: the task or mixer
    name all rows share, and per task (per mixer) the parameters all its rows share. So a title never
    repeats what every panel has, and long names do not overprint their neighbours."""
    parsed = []
    for label in labels:
        parts = label.split(" · ")
        task, mixer = (parts + ["", ""])[:2]
        parsed.append((task.split(), mixer.split(), parts[2:]))
    common: dict[tuple[int, str], set] = {}
    for tokens in parsed:
        for slot in (0, 1):
            if tokens[slot]:
                name, params = tokens[slot][0], set(tokens[slot][1:])
                common[slot, name] = common.get((slot, name), params) & params
    shared = [slot for slot in (0, 1) if len({t[slot][0] for t in parsed if t[slot]}) == 1 and len(parsed) > 1]
    titles = []
    for tokens in parsed:
        pieces = []
        for slot in (0, 1):
            if not tokens[slot]:
                continue
            name, own = tokens[slot][0], [p for p in tokens[slot][1:] if p not in common[slot, tokens[slot][0]]]
            pieces.append(" ".join(([] if slot in shared else [name]) + own))
        titles.append(" · ".join(p for p in pieces + tokens[2] if p) or ("all runs" if len(parsed) > 1 else ""))
    notes = []
    for (slot, name), params in sorted(common.items(), key=lambda item: item[0]):
        what = "task" if slot == 0 else "mixer"
        if slot in shared or params:
            notes.append(f"{what} {name}" + (f" ({' '.join(sorted(params))})" if params else ""))
    caption = ("Every panel: " if len(parsed) > 1 else "") + "; ".join(notes) + "." if notes else ""
    if len(parsed) == 1:
        caption, titles = f"{labels[0]}.", [""]
    return titles, caption


def _title(ax, text: str, width: int = 48) -> None:
    """A panel title wrapped to its panel (``width`` characters a line), never over its neighbour."""
    if text:
        ax.set_title("\n".join(textwrap.wrap(text, width)) or text)


def _plain_log(ax, axis: str = "y") -> None:
    """A log axis with plain tick labels (50, 100, 200; 0.001), not 2×10²."""
    which = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    which.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    which.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    which.set_minor_formatter(ticker.NullFormatter())


def _line(ax, x, y, **style) -> None:
    """A curve; with fewer than three points also its markers, so a one-point curve is still seen."""
    if len(x) < 3:
        style.setdefault("marker", "o")
    ax.plot(x, y, **style)


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
    figure, axes = _panels(2 * len(drawable), columns=4, height=2.9)
    for (loss_ax, accuracy_ax), title, (label, members) in zip(zip(axes[::2], axes[1::2]), titles, drawable):
        curves = _thin([np.array(m["curves"]["train_loss"]) for m in members if section(m, "curves").get("train_loss")])
        length = min(len(c) for c in curves)
        mean = np.mean([c[:length, 1] for c in curves], axis=0)
        for c in curves:
            _line(loss_ax, c[:, 0], c[:, 1], color="grey", alpha=0.3, linewidth=0.8)
        _line(loss_ax, curves[0][:length, 0], mean, color="C0", linewidth=1.8, label=f"mean of {len(curves)}")
        plateau = leaderboard.km_time(members, "plateau", "end_step")
        end = plateau["median"] if plateau["median"] is not None else plateau["budget"]
        loss_ax.axvspan(0, end, color="C1", alpha=0.15, label="plateau (median)")
        loss_ax.axhline(members[0]["plateau"]["threshold"], color="C3", linewidth=0.9, linestyle=":", label="threshold")
        evals = [np.array(m["curves"]["eval"]) for m in members if len(section(m, "curves").get("eval") or [])]
        for e in evals:
            _line(accuracy_ax, e[:, 0], e[:, 2], color="grey", alpha=0.3, linewidth=0.8)
        if evals:
            length = min(len(e) for e in evals)
            _line(accuracy_ax, evals[0][:length, 0], np.mean([e[:length, 2] for e in evals], axis=0), color="C2",
                  linewidth=1.8, label="mean eval accuracy")
        threshold = section(members[0], "emergence").get("threshold")
        if threshold is not None:
            accuracy_ax.axhline(threshold, color="C3", linewidth=0.9, linestyle=":", label="emergence threshold")
        for m in members:
            step = emergence_step(m)
            for ax in (loss_ax, accuracy_ax) if step is not None else ():
                ax.axvline(step, color="C2", linestyle="--", linewidth=0.9)
        if np.all(mean > 0):
            _plain_log(loss_ax)
        loss_ax.set_xlim(left=0)
        accuracy_ax.set_xlim(loss_ax.get_xlim())  # one step axis for both: a one-eval run is a dot, not a void
        accuracy_ax.set_ylim(-0.02, 1.02)
        _title(loss_ax, title, width=30)
        loss_ax.set_xlabel("step")
        loss_ax.set_ylabel("train loss (log)")
        accuracy_ax.set_xlabel("step")
        accuracy_ax.set_ylabel("eval accuracy")
    axes[0].legend(loc="lower left")
    axes[1].legend(loc="upper left")
    figure.tight_layout()
    return figure


def seed_columns(groups: list[tuple[str, list[ResultRow]]]) -> list[tuple[str, list[int], list[int]]]:
    """Per leaderboard row with measured seeds: (label, emergence steps of the seeds that emerged,
    budgets of the seeds that never did)."""
    columns = []
    for label, members in groups:
        measured = [m for m in members if m["status"] in ("ok", "diverged")]
        steps = [emergence_step(m) for m in measured]
        emerged = [step for step in steps if step is not None]
        never = [step_budget(m) for m, step in zip(measured, steps) if step is None]
        if measured:
            columns.append((label, emerged, never))
    return columns


def seed_scatter(groups: list[tuple[str, list[ResultRow]]]) -> Figure | None:
    """Emergence step per seed, one column per leaderboard row, on a log axis: dots for seeds that
    emerged, triangles at the budget for seeds that never did. Different seeds, different steps."""
    columns = seed_columns(groups)
    if not columns:
        return None
    figure, ax = plt.subplots(figsize=(PAGE_INCHES, 4.2))
    rng = np.random.default_rng(0)
    for i, (_, emerged, never) in enumerate(columns):
        ax.scatter(i + rng.uniform(-0.15, 0.15, len(emerged)), [max(1, s) for s in emerged], color="C0", s=20)
        ax.scatter(i + rng.uniform(-0.15, 0.15, len(never)), never, color="C3", marker="^", s=28)
    ax.scatter([], [], color="C0", s=20, label="emerged")
    ax.scatter([], [], color="C3", marker="^", s=28, label="never (drawn at the budget)")
    _plain_log(ax)
    ax.set_xlim(-0.5, len(columns) - 0.5)
    titles, _ = short_titles([label for label, _, _ in columns])
    many = len(columns) > 6  # then rotated, one line each: parallel labels never overprint
    ax.set_xticks(range(len(columns)), [t if many else "\n".join(textwrap.wrap(t, 24)) for t in titles],
                  rotation=45 if many else 0, ha="right" if many else "center", rotation_mode="anchor")
    ax.set_ylabel("emergence step (log)")
    ax.legend()
    return figure


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
    median-emergence seed, one line per cell, a dot where that cell emerged. Capabilities arriving
    one cell at a time show as a staircase."""
    shown = [(label, chosen) for label, members in groups
             if (chosen := staircase_seed(members, seed)) is not None][:limit]
    if not shown:
        return None
    names = dict(zip([label for label, _ in groups], short_titles([label for label, _ in groups])[0]))
    titles = [names[label] for label, _ in shown]
    figure, axes = _panels(len(shown))
    for ax, title, (label, record) in zip(axes, titles, shown):
        steps = np.array([step for step, _ in record["curves"]["eval_cells"]])
        losses = np.array([cells for _, cells in record["curves"]["eval_cells"]])  # [evals, cells]
        cells = losses.shape[1]
        emerged_at = section(record, "emergence").get("per_position") or [None] * cells
        shortcut = section(record, "task_facts").get("shortcut_cells") or [False] * cells
        colours = plt.cm.viridis(np.linspace(0, 0.9, cells))
        for c in range(cells):
            dashed = c < len(shortcut) and shortcut[c]
            _line(ax, steps, losses[:, c], color=colours[c], linewidth=1.2 if dashed else 1,
                  linestyle="--" if dashed else "-")
            at = emerged_at[c] if c < len(emerged_at) else None
            if at is not None and at in steps:
                ax.scatter([at], [losses[list(steps).index(at), c]], color=colours[c], s=16, zorder=3)
        if any(shortcut):
            ax.plot([], [], color="grey", linestyle="--", label="shortcut cell")
            ax.plot([], [], color="grey", label="pattern cell")
            ax.legend(loc="lower left")
        if np.all(losses > 0):
            _plain_log(ax)
        ax.set_xlim(0, max(float(steps.max()), 1.0) * 1.05)
        _title(ax, f"{title + ', ' if title else ''}seed {record['seed']}", width=44)
        ax.set_xlabel("step")
        ax.set_ylabel("eval loss per cell (log)")
    figure.tight_layout()
    return figure


MAX_LINES = 10  # lines in one metric-vs-axis figure; more cannot be told apart


def numeric_axes(records: list[ResultRow]) -> list[str]:
    """The numeric config keys that vary among ``records`` (seed aside), in config order."""
    flats = pd.DataFrame([leaderboard.flatten(scientific(r["config"])) for r in records])
    return [k for k in flats.columns if k != "seed" and pd.api.types.is_numeric_dtype(flats[k])
            and not pd.api.types.is_bool_dtype(flats[k]) and flats[k].nunique() > 1]


def axis_lines(records: list[ResultRow], axis: str) -> dict[str, list[dict]]:
    """Per line (every other varying key's values, e.g. the mixer or the intervention), per value of
    ``axis``: the Kaplan–Meier medians of the plateau end and the emergence step, with intervals and
    the budget (a median not reached is None)."""
    pairs = [(r, leaderboard.flatten(scientific(r["config"]))) for r in records if r["status"] in ("ok", "diverged")]
    pairs = [(r, flat) for r, flat in pairs if flat.get(axis) is not None]  # runs of another family lack it
    flats = [flat for _, flat in pairs]
    keys = dict.fromkeys(k for f in flats for k in f)  # every key, in config order

    def follows_axis(key: str) -> bool:  # one value per axis value (head_dim as heads rise): no line of its own
        seen: dict[str, set] = {}
        for f in flats:
            seen.setdefault(json.dumps(f.get(axis), default=str), set()).add(json.dumps(f.get(key), default=str))
        return all(len(values) == 1 for values in seen.values())

    varying = [k for k in keys if k not in (axis, "seed") and len({json.dumps(f.get(k), default=str) for f in flats}) > 1]
    if any(k in ("task.name", "mixer.name") and follows_axis(k) for k in varying):
        return {}  # each value of the axis is another task or mixer: a comparison of those, not of the axis
    others = [k for k in varying if not follows_axis(k)]
    cells: dict[tuple, list[ResultRow]] = {}
    for record, flat in pairs:
        line = " ".join(f"{k.split('.')[-1]}={flat[k]}" for k in others if flat.get(k) is not None) or "all runs"
        cells.setdefault((line, flat[axis]), []).append(record)
    lines: dict[str, list[dict]] = {}
    for (line, value), members in sorted(cells.items(), key=lambda item: (item[0][0], item[0][1])):
        lines.setdefault(line, []).append({"value": value, "seeds": len(members),
                                           "plateau": leaderboard.km_time(members, "plateau", "end_step"),
                                           "emergence": leaderboard.km_time(members, "emergence", "step")})
    return lines


def axis_figure(records: list[ResultRow], axis: str) -> Figure | None:
    """Median plateau end and median emergence (Kaplan–Meier, with 95% intervals) against ``axis``,
    one line per setting of the other varying keys; a median not reached is an arrow at the budget.
    The axes are log-scaled where the values span more than a decade."""
    lines = axis_lines(records, axis)
    if not lines or max(len(points) for points in lines.values()) < 2 or len(lines) > MAX_LINES:
        return None  # nothing to draw against, or too many lines to tell apart
    figure, axes = plt.subplots(1, 2, figsize=(PAGE_INCHES, 4.2))
    for ax, metric, title in zip(axes, ("plateau", "emergence"), ("median plateau end", "median emergence step")):
        values = []
        for i, (line, points) in enumerate(lines.items()):
            x = np.array([p["value"] for p in points], dtype=float)
            median = np.array([np.nan if p[metric]["median"] is None else p[metric]["median"] for p in points])
            low = np.array([np.nan if p[metric]["low"] is None else p[metric]["low"] for p in points])
            high = np.array([p[metric]["budget"] if p[metric]["high"] is None else p[metric]["high"] for p in points])
            reached = ~np.isnan(median)
            ax.errorbar(x[reached], median[reached], yerr=[median[reached] - np.where(np.isnan(low), median, low)[reached],
                                                           high[reached] - median[reached]],
                        marker="o", capsize=3, color=f"C{i % 10}", label=line.replace("name=", ""))
            budgets = np.array([p[metric]["budget"] for p in points], dtype=float)
            ax.scatter(x[~reached], budgets[~reached], marker="^", s=60, color=f"C{i % 10}")
            values += list(median[reached]) + list(budgets[~reached])
        xs = sorted({p["value"] for points in lines.values() for p in points})
        if min(xs) > 0 and max(xs) / min(xs) > 10:
            _plain_log(ax, "x")
        if len(xs) <= 12:  # the values the sweep ran, not a continuum between them
            ax.set_xticks(xs, [f"{x:g}" for x in xs])
            ax.minorticks_off()
        if values and min(values) > 0 and max(values) / min(values) > 10:
            _plain_log(ax)
        ax.set_xlabel(axis)
        ax.set_ylabel(title)
        ax.set_title(f"{title} (▲: not reached, at the budget)")
    handles, labels = axes[0].get_legend_handles_labels()  # below both panels: long line names overprint nothing
    figure.legend(handles, ["\n".join(textwrap.wrap(label, 60)) for label in labels], loc="upper center",
                  bbox_to_anchor=(0.5, 0.0), ncol=2 if len(labels) > 1 else 1, frameon=False)
    figure.tight_layout()
    return figure


def heatmap(records: list[ResultRow], axes: tuple[str, str] | None) -> tuple[Figure | None, tuple[str, str] | None]:
    """Mean final eval loss over two config axes (the first two numeric axes that vary, unless given)."""
    measured = [r for r in records if r["status"] in ("ok", "diverged")
                and r["metrics"].get("final_eval_loss") is not None]
    if not measured:
        return None, None
    flats = pd.DataFrame([leaderboard.flatten(r["config"]) for r in measured])
    if axes is None:
        numeric = [k for k in flats.columns if k != "seed" and pd.api.types.is_numeric_dtype(flats[k])
                   and flats[k].nunique() > 1]
        if len(numeric) < 2:
            return None, None
        axes = (numeric[0], numeric[1])
    for axis in axes:
        if axis not in flats.columns:
            raise ValueError(f"no config key {axis!r} in these results; keys: {', '.join(sorted(flats.columns))}")
    flats["loss"] = [r["metrics"]["final_eval_loss"] for r in measured]
    grid = flats.groupby(list(axes))["loss"].mean().unstack()
    figure, ax = plt.subplots(figsize=(min(PAGE_INCHES, 2.5 + 0.8 * grid.shape[1]), 1.5 + 0.5 * grid.shape[0]))
    image = ax.imshow(grid.values, cmap="viridis", aspect="auto")
    ax.set_xticks(range(grid.shape[1]), [str(c) for c in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [str(i) for i in grid.index])
    ax.set_xlabel(axes[1])
    ax.set_ylabel(axes[0])
    for (i, j), value in np.ndenumerate(grid.values):
        if not np.isnan(value):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", color="white", fontsize=9)
    figure.colorbar(image, ax=ax, label="final eval loss")
    return figure, axes


def ladder_figure(ranked: dict) -> Figure | None:
    """Per task family (columns): success rate vs rung per mixer with 95% Wilson intervals (top), and
    the median plateau end vs rung on a log axis (bottom), a median not reached drawn as an arrow
    at the budget. None when no family has more than one rung."""
    ladders = {f: l for f, l in ranked["ladders"].items() if len(l["rungs"]) > 1}
    if not ladders:
        return None
    cells = ranked["cells"]
    mixers = sorted(cells["mixer"].unique())
    figure, axes = plt.subplots(2, len(ladders), figsize=(PAGE_INCHES, 6.5), squeeze=False)
    for column, (family, ladder) in enumerate(sorted(ladders.items())):
        top, bottom = axes[0, column], axes[1, column]
        for i, mixer in enumerate(mixers):
            rows = cells[(cells["family"] == family) & (cells["mixer"] == mixer)].sort_values("rung_index")
            rows = rows[rows["success_rate"].notna()]
            if rows.empty:
                continue
            x = rows["rung_index"] + (i - (len(mixers) - 1) / 2) * 0.06  # side by side, not on top of each other
            rate = rows["success_rate"]
            top.errorbar(x, rate, yerr=[rate - rows["success_low"], rows["success_high"] - rate], marker="o",
                         capsize=3, color=f"C{i}", label=mixer)
            reached = rows["median_plateau_end"].notna()
            bottom.plot(x[reached], rows["median_plateau_end"][reached], marker="o", color=f"C{i}", label=mixer)
            bottom.scatter(x[~reached], rows["budget"][~reached], marker="^", s=60, color=f"C{i}")
        for ax in (top, bottom):
            ax.set_xticks(range(len(ladder["rungs"])), [str(r) for r in ladder["rungs"]])
            ax.set_xlabel(ladder["axis"])
        top.set_ylim(-0.05, 1.05)
        top.set_title(family)
        top.set_ylabel("success rate (emerged)")
        _plain_log(bottom)
        bottom.set_ylabel("median plateau end\n(▲: not reached, at budget)")
    axes[0, 0].legend()
    figure.tight_layout()
    return figure


def _map(ax, image: torch.Tensor, scored: torch.Tensor, scale: dict, title: str, left: bool, bottom: bool):
    """One [L, L] attention map: the rows that are not scored greyed out, query and key positions
    labelled on the outer panels. Returns the image (for the colour bar)."""
    length = image.shape[-1]
    unscored = np.repeat(~scored.numpy()[:, None], length, axis=1)
    colours = plt.get_cmap(scale["cmap"]).with_extremes(bad="#cfcfcf")  # a row not scored: grey, whatever its weights
    shown = ax.imshow(np.ma.masked_array(image.numpy(), mask=unscored), cmap=colours, vmin=scale["vmin"],
                      vmax=scale["vmax"], interpolation="nearest")
    ticks = sorted({0, length // 2, length - 1})
    ax.set_xticks(ticks, [str(t) for t in ticks] if bottom else [])
    ax.set_yticks(ticks, [str(t) for t in ticks] if left else [])
    if bottom:
        ax.set_xlabel("key position")
    if left:
        ax.set_ylabel("query position")
    ax.set_title(title, fontsize=9)
    return shown


def _map_grid(rows: int, columns: int):
    """A grid of square map panels at most the page's width, laid out to leave room for a colour bar."""
    side = min(1.9, (PAGE_INCHES - 1.2) / columns)
    return plt.subplots(rows, columns, figsize=(side * columns + 1.2, side * rows + 0.9), squeeze=False,
                        layout="constrained")


def attention_maps(run_dir: Path, label: str) -> Figure | None:
    """Each head's mean attention map (last eval) beside the ground truth, per probed layer, all on
    one colour scale (a colour bar beside them); the rows the task does not score are grey."""
    path = run_dir / MAPS_FILE
    if not path.is_file():
        return None
    saved = torch.load(path)
    layers, maps, truth = saved["layers"], saved["maps"], saved["ground_truth"]
    heads = max(m.shape[0] for m in maps)
    # The ground truth drawn as the attention that would follow it exactly (each row spread evenly over
    # its sources), on the heads' own colour scale: a head that found the pattern looks like it.
    ideal, scored = _ideal(truth), truth.sum(-1) > 0
    scale = {"cmap": "magma", "vmin": 0.0, "vmax": max([float(ideal.max())] + [float(m.max()) for m in maps])}
    figure, axes = _map_grid(len(layers), heads + 1)
    shown = None
    for row, (layer, probs) in enumerate(zip(layers, maps)):
        for head in range(heads + 1):
            ax, bottom = axes[row, head], row == len(layers) - 1
            if head < probs.shape[0]:
                shown = _map(ax, probs[head], scored, scale, f"layer {layer} head {head}", head == 0, bottom)
            elif head == heads:
                _map(ax, ideal, scored, scale, "ground truth", head == 0, bottom)
            else:
                ax.axis("off")
    figure.colorbar(shown, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight (grey: row not scored)")
    figure.suptitle(f"{label + ', ' if label else ''}step {saved['step']}")
    return figure


def _ideal(truth: torch.Tensor) -> torch.Tensor:
    """The ground truth [L, L] drawn as the attention that would follow it exactly: each row spread
    evenly over its sources."""
    return truth.float() / truth.float().sum(-1, keepdim=True).clamp_min(1)


def filmstrip(run_dir: Path, record: ResultRow, label: str) -> Figure | None:
    """The best head's map at the start, when the pattern was found, at emergence and at the end,
    beside the ground truth, all on one colour scale; None without saved moments (an older run) or
    without a best head (a mixer without attention scores)."""
    path, best = run_dir / MAPS_FILE, section(record, "attention_probe").get("best_head")
    if not path.is_file() or not best:
        return None
    saved = torch.load(path)
    moments = saved.get("moments")
    if not moments:
        return None
    index = saved["layers"].index(best["layer"])
    moments = sorted(moments, key=lambda m: m["step"])  # emergence may come before "pattern found"
    frames = [(f"{m['moment']} (step {m['step']})", m["maps"][index][best["head"]]) for m in moments]
    frames.append(("ground truth", _ideal(saved["ground_truth"])))
    scale = {"cmap": "magma", "vmin": 0.0, "vmax": max(float(frame.max()) for _, frame in frames)}
    scored = saved["ground_truth"].sum(-1) > 0
    figure, axes = _map_grid(1, len(frames))
    for i, (ax, (title, frame)) in enumerate(zip(axes[0], frames)):
        shown = _map(ax, frame, scored, scale, title, i == 0, True)
    figure.colorbar(shown, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    figure.suptitle(f"{label + ', ' if label else ''}seed {record['seed']}: layer {best['layer']} head {best['head']}")
    return figure


# --- the figures, registered in the page's order (like check-mixer's checks) ------------------------
@dataclass
class Drawn:
    """One figure drawn for the report, saved as ``file``. The first of a registered figure's drawings
    opens its section (its ``title`` and ``caption`` unless these say otherwise); a later one with a
    ``title`` opens a section of its own. ``html`` goes above the figure (a table); ``alt``: the
    image's text (default: the title, lower case)."""

    figure: Figure
    file: str
    title: str | None = None
    caption: str | None = None
    alt: str | None = None
    html: tuple[str, ...] = ()


@dataclass
class Results:
    """What the report's figures are drawn from: the rows, their leaderboard groups (label, members),
    the results folder (for the saved attention maps) and the report's options."""

    records: list[ResultRow]
    groups: list[tuple[str, list[ResultRow]]] = field(default_factory=list)
    root: Path | None = None
    axes: tuple[str, str] | None = None
    maps: int = 4
    seed: int | None = None
    ranked: dict | None = None  # rank.build's, once the ranking is drawn (its parts use it)

    @functools.cached_property
    def titles(self) -> dict[str, str]:
        """Each group's short panel title (``short_titles``)."""
        labels = [label for label, _ in self.groups]
        return dict(zip(labels, short_titles(labels)[0]))


@dataclass(frozen=True)
class ReportFigure:
    """A figure of the report: ``name`` (what ``--figures`` chooses), its section's ``title`` and
    ``caption`` (how to read it), and ``absent``: why it is not drawn, shown instead where ``draw``
    draws nothing. A ``part_of`` figure is drawn only with that one, after it."""

    name: str
    title: str
    caption: str
    absent: str
    draw: Callable[[Results], list[Drawn]]
    part_of: str | None = None


REGISTRY: dict[str, ReportFigure] = {}


def register_figure(name: str, title: str, caption: str, absent: str, part_of: str | None = None):
    """Adds ``draw(results) -> [Drawn]`` to REGISTRY (in the page's order) as figure ``name``."""
    def decorator(draw: Callable[[Results], list[Drawn]]) -> Callable[[Results], list[Drawn]]:
        REGISTRY[name] = ReportFigure(name, title, caption, absent, draw, part_of)
        return draw

    return decorator


def show(page: Page, figure: ReportFigure, results: Results) -> bool:
    """Draw ``figure`` (then its parts) into ``page``, or list it as absent with its reason; whether
    it was drawn."""
    drawn = figure.draw(results)
    if not drawn:
        page.absent(figure.name, figure.absent)
        return False
    for i, item in enumerate(drawn):
        title = item.title or figure.title
        if i == 0 or item.title is not None:
            page.section(title, item.caption if item.caption is not None else figure.caption)
        page.add(*item.html)
        page.figure(item.figure, item.file, item.alt or title.lower())
    for part in REGISTRY.values():
        if part.part_of == figure.name:
            show(page, part, results)
    return True


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


@register_figure("staircase", "Per-cell eval loss (the staircase)",
                 "Each output cell's eval loss over training, one line per cell, for each group's median-emergence "
                 "seed (log axis); a dot where that cell emerged; dashed: a shortcut cell, predictable from earlier "
                 "outputs without the sparse pattern. Cells that drop one after another are capabilities arriving "
                 "one at a time.", "no run kept its per-cell eval losses (curves.eval_cells: results from an older "
                 "version)")
def _staircase(results: Results) -> list[Drawn]:
    figure = staircase(results.groups, limit=max(1, results.maps), seed=results.seed)
    return [Drawn(figure, "staircase")] if figure else []


@register_figure("seeds", "Emergence step per seed",
                 "One column per leaderboard row, one dot per seed (log axis); a triangle at the budget marks a seed "
                 "that never emerged. The spread within a column is how much the step depends on the seed alone.",
                 "no run finished (ok or diverged)")
def _seeds(results: Results) -> list[Drawn]:
    figure = seed_scatter(results.groups)
    return [Drawn(figure, "emergence-per-seed")] if figure else []


@register_figure("ranking", "Ranking", "",
                 "no task family varies one numeric task key over two or more mixers (see `rank`)")
def _ranking(results: Results) -> list[Drawn]:
    """The ranking's tables and ladder figure, where the results hold a ladder (``rank``)."""
    try:
        ranked = rank.build(results.records)
    except ConfigError:  # no single ladder per family: the sweep is not a ranking
        return []
    figure = ladder_figure(ranked)
    if figure is None or ranked["ranking"]["mixer"].nunique() < 2:
        if figure is not None:
            plt.close(figure)
        return []
    results.ranked = ranked
    tables = rank.tables(ranked)
    return [Drawn(figure, "ranking", caption=html.escape(rank.ranking_note(ranked["baseline"])),
                  alt="success and plateau vs rung",
                  html=(tables["ranking"].html(), "<h3>Frontier per task family</h3>", tables["frontier"].html(),
                        "<p>Top: success rate per rung with 95% Wilson intervals, one line per mixer. Bottom: the "
                        "median plateau end per rung on a log axis; a triangle at the budget where the median was "
                        "not reached.</p>"))]


@register_figure("tuning", "Tuning curves",
                 "Per task family, each mixer's success area on the tuning rung(s) against its learning rate, on the "
                 "tuning seeds, with 95% Wilson intervals (mixers offset a little sideways where they overlap); the "
                 "large dot is the lr the ranking used (the choice rule: area, then the median emergence step, then "
                 "the smaller lr), hollow where it lies on an edge of the grid even after widening.",
                 "no tuning table: the runs were not tuned here (DIR/tuning) nor at the shipped reference's values",
                 part_of="ranking")
def _tuning(results: Results) -> list[Drawn]:
    tables = read_tables(results.root / TUNING_DIR) if results.root else []
    have = {(t["mixer"], t["group"]) for t in tables}
    tables += rank.reference_tuning(None, results.records, have)
    figure = tuning_figure(tables)
    return [Drawn(figure, "tuning-curves", alt="success area against learning rate")] if figure else []


@register_figure("survival", "Survival by rung",
                 "Per rung, the fraction of each mixer's seeds not yet emerged (upper row of a family) and still on "
                 "the loss plateau (lower row) against step: Kaplan–Meier curves, a tick where a run stopped "
                 "before the event (censored). A curve that falls earlier is a mixer that finds the pattern sooner.",
                 "no ranked runs", part_of="ranking")
def _survival(results: Results) -> list[Drawn]:
    figure = comparison.survival_figure(results.ranked, results.records) if results.ranked else None
    return [Drawn(figure, "survival")] if figure else []


@register_figure("forest", "Plateau ratio", "", "no baseline mixer (rank --baseline) among the results",
                 part_of="ranking")
def _forest(results: Results) -> list[Drawn]:
    figure = comparison.forest_figure(results.ranked) if results.ranked else None
    if figure is None or results.ranked is None:
        return []
    baseline = results.ranked["baseline"] or "the baseline"
    return [Drawn(figure, "forest", caption=(
        f"Each mixer's median plateau end over {html.escape(baseline)}'s: the geometric mean over cells "
        "(square) with its 95% bootstrap interval, each cell's ratio behind it (open: a bound, the median "
        "not reached within the budget). Left of the dashed line: off the plateau sooner."))]


@register_figure("state", "State size and quality",
                 "Success score and plateau ratio against the state each mixer carries per sequence at inference "
                 "(attention's grows with the sequence; the largest in the ranking is drawn).",
                 "the results do not record state sizes (runs from before state_size was recorded)", part_of="ranking")
def _state(results: Results) -> list[Drawn]:
    figure = comparison.state_figure(results.ranked) if results.ranked else None
    return [Drawn(figure, "state")] if figure else []


@register_figure("axes", "Plateau and emergence against a sweep axis",
                 "Kaplan–Meier medians over the seeds with 95% intervals, one line per setting of the other keys "
                 "that vary; a triangle at the budget where the median was not reached.",
                 f"no numeric config key varies with two or more values per line (at most {MAX_LINES} lines)")
def _axes(results: Results) -> list[Drawn]:
    drawn = []
    for axis in numeric_axes(results.records)[:3]:
        figure = axis_figure(results.records, axis)
        if figure:
            drawn.append(Drawn(figure, f"against-{_slug(axis)}", title=f"Plateau and emergence against {axis}",
                               alt=f"metrics vs {axis}"))
    return drawn


@register_figure("thresholds", "Threshold sensitivity",
                 "Left: each group's median emergence step (Kaplan–Meier over seeds) against the accuracy threshold τ, "
                 "as a fraction of the task's reachable accuracy; right: its median plateau end against the loss "
                 "threshold, the fraction f of the way from chance (or the shortcut baseline) to the floor. Dashed: the "
                 "thresholds the runs used. A conclusion that holds along the whole curve does not depend on the "
                 "threshold; a missing point is a median not reached (runs that stopped at their emergence are "
                 "censored there for a higher τ). The plateau curve reads the recorded train-loss means, not the "
                 "callback's EMA, so at its own f it can differ from the leaderboard by a few steps.",
                 "no run recorded eval curves")
def _thresholds(results: Results) -> list[Drawn]:
    figure = threshold_figure(results.groups)
    return [Drawn(figure, "threshold-sensitivity")] if figure else []


@register_figure("heatmap", "Final eval loss over two sweep axes",
                 "The mean over seeds of each cell's final eval loss: darker is lower.",
                 "fewer than two numeric config keys vary (or --axes names them)")
def _heatmap(results: Results) -> list[Drawn]:
    figure, used = heatmap(results.records, results.axes)
    return [Drawn(figure, "heatmap", title=f"Final eval loss over {used[0]} × {used[1]}")] if figure and used else []


@register_figure("filmstrip", "Attention over time",
                 "The best head's map at the start, when the pattern was found, at emergence and at the end, beside "
                 "the ground truth, all on one colour scale (the truth drawn as the attention that follows it "
                 "exactly).", "no run saved its attention maps at the four moments (a mixer without attention "
                 "scores, or results from an older version)")
def _filmstrip(results: Results) -> list[Drawn]:
    drawn: list[Drawn] = []
    for label, members in results.groups:
        if len(drawn) >= results.maps:
            break
        record = staircase_seed(members, results.seed) or (None if results.seed is not None else members[0])
        run_dir = _run_dir(results.root, record) if record is not None and results.root else None
        figure = filmstrip(run_dir, record, results.titles[label]) if run_dir and record is not None else None
        if figure:
            drawn.append(Drawn(figure, f"filmstrip-{_slug(label)}", alt=f"attention over time {label}"))
    return drawn


@register_figure("maps", "Attention maps beside the ground truth",
                 "Each group's last attention maps (one panel a head; rows: the query position, columns: the key it "
                 "attends to) next to the task's true sources, on one colour scale; grey rows are positions the task "
                 "does not score.", "no run saved attention maps (mixers without attention scores, or no attention "
                 "probe)")
def _maps(results: Results) -> list[Drawn]:
    drawn: list[Drawn] = []
    for label, members in results.groups:
        if len(drawn) >= results.maps:
            break
        run_dir = _run_dir(results.root, members[0]) if results.root else None
        title = results.titles[label]
        figure = attention_maps(run_dir, f"{title + ', ' if title else ''}seed {members[0]['seed']}") \
            if run_dir else None
        if figure:
            drawn.append(Drawn(figure, f"attention-{_slug(label)}", alt=f"attention {label}"))
    return drawn


FIGURES = tuple(name for name, figure in REGISTRY.items() if figure.part_of is None)  # what --figures may choose


def write(root: str | Path, out: str | Path | None = None, axes: tuple[str, str] | None = None,
          maps: int = 4, over: tuple[str, ...] = ("seed",), strict: bool = False,
          figures: tuple[str, ...] | None = None, seed: int | None = None) -> Path:
    """Write the report for every result under ``root``; returns the HTML file's path. Its figures
    also go to ``<report stem>_figures/`` beside it as PNG and SVG. ``figures``: those of FIGURES
    to draw (default: every one the results allow). ``seed``: the seed the staircase and filmstrip
    show (default: each group's median-emergence seed). ``strict``: an unreadable result file is an
    error, not a warning (see results.load_records)."""
    chosen = FIGURES if figures is None else tuple(figures)
    unknown = [f for f in chosen if f not in FIGURES]
    if unknown:
        raise ValueError(f"--figures: no figure named {', '.join(unknown)}; figures: {', '.join(FIGURES)}")
    root = Path(root)
    out = Path(out) if out else root / REPORT_FILE
    records = load_records(root, strict=strict, exclude=(TUNING_DIR,))  # the tuning runs: their own figure
    if not records:
        raise ValueError(f"no {RESULT_FILE} under {root}")
    table = leaderboard.build(records, over, keep_keys=True)
    results = Results(records, _groups(records, table, over), root, axes, maps, seed)
    page = Page(out.with_name(f"{out.stem}_figures"))
    page.add(f"<p>{len(records)} runs in {len(table)} groups.</p>")
    page.section("Leaderboard")
    page.add(leaderboard.human_table(table.drop(columns="_key")).html())
    note = mixed_code_note(records)
    if note:
        page.add(f"<p><b>Note:</b> {html.escape(note)} (see Provenance below).</p>")
    for name in FIGURES:
        if name in chosen:
            show(page, REGISTRY[name], results)
    page.section("Provenance", "Where these numbers come from: the code, the software, the machines and the "
                 "commands, with the number of runs for each.")
    page.add(provenance_table(records).html())
    write_text(out, page.html(f"emergence-bench report: {root}"))
    return out


def provenance_table(records: list[ResultRow]) -> Table:
    """What the runs were computed with: commits (dirty or not), versions, devices, machines, thread
    and allocator policies, commands; each value with its number of runs."""
    def counted(values: Iterable[object]) -> str:
        counts = Counter(values)
        return "\n".join(f"{v} ({n} run{'s' if n > 1 else ''})" for v, n in counts.most_common(8)) \
            + (f"\n… and {len(counts) - 8} more" if len(counts) > 8 else "")

    def provenance(r: ResultRow, *keys: str) -> object:
        value: object = section(r, "provenance")
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return "not recorded" if value is None else value

    def versions(r: ResultRow) -> str:
        return ", ".join(f"{k} {v}" for k, v in (r.get("versions") or {}).items() if v) or "not recorded"

    def machine(r: ResultRow) -> str:
        return (f"{provenance(r, 'machine', 'host')} ({provenance(r, 'machine', 'platform')}, "
                f"{provenance(r, 'machine', 'cpus')} CPUs)" if r.get("provenance") else "not recorded")

    def threads(r: ResultRow) -> str:
        return (f"{provenance(r, 'threads', 'setting')} → {provenance(r, 'threads', 'used')} thread(s)"
                if r.get("provenance") else "not recorded")

    return Table([], [["code (git commit)", counted(code_version(r) for r in records)],
                      ["versions", counted(versions(r) for r in records)],
                      ["device", counted(r.get("device") or "not recorded" for r in records)],
                      ["machine", counted(machine(r) for r in records)],
                      ["threads (setting → used)", counted(threads(r) for r in records)],
                      ["allocator", counted(provenance(r, "allocator") for r in records)],
                      ["command", counted(provenance(r, "command") for r in records)]], row_headers=True)


def ranking_section(records: list[ResultRow], page: Page) -> bool:
    """The ranking's section (tables, ladder figure and its parts), where the results hold a ladder
    (``rank``); whether there was one."""
    return show(page, REGISTRY["ranking"], Results(records))


def _run_dir(root: Path, record: ResultRow) -> Path | None:
    found = list(root.rglob(f"{record['run_id']}/{RESULT_FILE}"))
    return found[0].parent if found else None
