"""Plateau and emergence against a numeric sweep axis: Kaplan–Meier medians with intervals, one
line per setting of the other keys that vary."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from emergence_bench.config import hashed_config
from emergence_bench.measurements.emergence import EMERGENCE
from emergence_bench.measurements.plateau import PLATEAU
from emergence_bench.reporting import leaderboard
from emergence_bench.reporting.figure import Drawn, Results, register_figure
from emergence_bench.reporting.plotting import PAGE_INCHES, plain_log, plt, slug
from emergence_bench.results.row import ResultRow

MAX_LINES = 10  # lines in one metric-vs-axis figure; more cannot be told apart


def numeric_axes(records: list[ResultRow]) -> list[str]:
    """The numeric config keys that vary among ``records`` (seed aside), in config order."""
    flats = pd.DataFrame([leaderboard.flatten(hashed_config(r["config"])) for r in records])
    return [k for k in flats.columns if k != "seed" and pd.api.types.is_numeric_dtype(flats[k])
            and not pd.api.types.is_bool_dtype(flats[k]) and flats[k].nunique() > 1]


def axis_lines(records: list[ResultRow], axis: str) -> dict[str, list[dict]]:
    """Per line (every other varying key's values, e.g. the mixer or the intervention), per value of
    ``axis``: the Kaplan–Meier medians of the plateau end and the emergence step, with intervals and
    the budget (a median not reached is None)."""
    pairs = [(r, leaderboard.flatten(hashed_config(r["config"]))) for r in records if r["status"] in ("ok", "diverged")]
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
                                           "plateau": leaderboard.km_time(members, PLATEAU, "end_step"),
                                           "emergence": leaderboard.km_time(members, EMERGENCE, "step")})
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
        ax.margins(x=0.08, y=0.1)  # room for the markers (and caps) at the first and last values
        if min(xs) > 0 and max(xs) / min(xs) > 10:
            plain_log(ax, "x")
        if len(xs) <= 12:  # the values the sweep ran, not a continuum between them
            ax.set_xticks(xs, [f"{x:g}" for x in xs])
            ax.minorticks_off()
        if values and min(values) > 0 and max(values) / min(values) > 10:
            plain_log(ax)
        ax.set_xlabel(axis)
        ax.set_ylabel(title)
        ax.set_title(f"{title} (▲: not reached, at the budget)")
    handles, labels = axes[0].get_legend_handles_labels()  # below both panels: long line names overprint nothing
    figure.legend(handles, ["\n".join(textwrap.wrap(label, 60)) for label in labels], loc="upper center",
                  bbox_to_anchor=(0.5, 0.0), ncol=2 if len(labels) > 1 else 1, frameon=False)
    figure.tight_layout()
    return figure


@register_figure("axes", "Plateau and emergence against a sweep axis",
                 "Kaplan–Meier medians over the seeds with 95% intervals, one line per setting of the other keys "
                 "that vary; a triangle at the budget where the median was not reached.",
                 f"no numeric config key varies with two or more values per line (at most {MAX_LINES} lines)")
def _axes(results: Results) -> list[Drawn]:
    drawn = []
    for axis in numeric_axes(results.records)[:3]:
        figure = axis_figure(results.records, axis)
        if figure:
            drawn.append(Drawn(figure, f"against-{slug(axis)}", title=f"Plateau and emergence against {axis}",
                               alt=f"metrics vs {axis}"))
    return drawn
