"""Plateau and emergence against a numeric sweep axis: Kaplan–Meier medians with intervals, one line
per setting of the other keys that vary. Every numeric axis is tried; the caption of each figure says
which runs it draws and what changes with its axis, and the first one names the axes not drawn and
why (so a figure never stands for more than it draws)."""

from __future__ import annotations

import html
import json
import textwrap
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from emergence_bench.config import hashed_config
from emergence_bench.measurements.emergence import EMERGENCE
from emergence_bench.measurements.plateau import PLATEAU
from emergence_bench.reporting import leaderboard
from emergence_bench.reporting.figure import Drawn, NotDrawn, Results, register_figure
from emergence_bench.reporting.plotting import PAGE_INCHES, plain_log, plt, slug
from emergence_bench.results.row import ResultRow

MAX_LINES = 10  # lines in one metric-vs-axis figure; more cannot be told apart


def numeric_axes(records: list[ResultRow]) -> list[str]:
    """The numeric config keys that vary among ``records`` (seed aside), in config order."""
    flats = pd.DataFrame([leaderboard.flatten(hashed_config(r["config"])) for r in records])
    return [k for k in flats.columns if k != "seed" and pd.api.types.is_numeric_dtype(flats[k])
            and not pd.api.types.is_bool_dtype(flats[k]) and flats[k].nunique() > 1]


@dataclass
class AxisLines:
    """What a figure against ``axis`` draws: per line, per value of the axis, the medians; the runs it
    reads (those that set the axis), the task and mixer names among them, the keys whose value changes
    with the axis (one per axis value: no line of their own), and why it cannot be drawn, if so."""

    axis: str
    lines: dict[str, list[dict]] = field(default_factory=dict)
    runs: int = 0
    names: list[str] = field(default_factory=list)
    follows: dict[str, list] = field(default_factory=dict)  # key -> its value at each axis value, in order
    why_not: str | None = None


def axis_lines(records: list[ResultRow], axis: str) -> AxisLines:
    """Per line (every other varying key's values, e.g. the mixer or the intervention; where none
    varies, the one line is named by its task and mixer), per value of ``axis``: the Kaplan–Meier
    medians of the plateau end and the emergence step, with intervals and the budget (a median not
    reached is None)."""
    pairs = [(r, leaderboard.flatten(hashed_config(r["config"]))) for r in records if r["status"] in ("ok", "diverged")]
    pairs = [(r, flat) for r, flat in pairs if flat.get(axis) is not None]  # runs of another family lack it
    flats = [flat for _, flat in pairs]
    keys = dict.fromkeys(k for f in flats for k in f)  # every key, in config order
    names = [sorted({str(f[key]) for f in flats if f.get(key)}) for key in ("task.name", "mixer.name")]
    found = AxisLines(axis, runs=len(pairs), names=names[0] + names[1])  # the tasks, then the mixers

    def values_along(key: str) -> dict[str, set]:
        seen: dict[str, set] = {}
        for f in flats:
            seen.setdefault(json.dumps(f.get(axis), default=str), set()).add(json.dumps(f.get(key), default=str))
        return seen

    def follows_axis(key: str) -> bool:  # one value per axis value (head_dim as heads rise): no line of its own
        return all(len(values) == 1 for values in values_along(key).values())

    varying = [k for k in keys
               if k not in (axis, "seed") and len({json.dumps(f.get(k), default=str) for f in flats}) > 1]
    if any(k in ("task.name", "mixer.name") and follows_axis(k) for k in varying):
        found.why_not = "each of its values is another task or mixer (a comparison of those, not of the axis)"
        return found
    others = [k for k in varying if not follows_axis(k)]
    order = sorted({f[axis] for f in flats})
    found.follows = {k: [json.loads(next(iter(values_along(k)[json.dumps(v, default=str)]))) for v in order]
                     for k in varying if k not in others}
    alone = " · ".join(found.names) or "all runs"
    cells: dict[tuple, list[ResultRow]] = {}
    for record, flat in pairs:
        line = " ".join(f"{k.split('.')[-1]}={flat[k]}" for k in others if flat.get(k) is not None) or alone
        cells.setdefault((line, flat[axis]), []).append(record)
    for (line, value), members in sorted(cells.items(), key=lambda item: (item[0][0], item[0][1])):
        found.lines.setdefault(line, []).append({"value": value, "seeds": len(members),
                                                 "plateau": leaderboard.km_time(members, PLATEAU, "end_step"),
                                                 "emergence": leaderboard.km_time(members, EMERGENCE, "step")})
    if max((len(points) for points in found.lines.values()), default=0) < 2:
        found.why_not = "no line has two or more of its values"
    elif len(found.lines) > MAX_LINES:
        found.why_not = f"{len(found.lines)} lines, more than {MAX_LINES} can be told apart"
    return found


def axis_figure(records: list[ResultRow], axis: str) -> Figure | None:
    """Median plateau end and median emergence (Kaplan–Meier, with 95% intervals) against ``axis``,
    one line per setting of the other varying keys; a median not reached is an arrow at the budget.
    The axes are log-scaled where the values span more than a decade. None where ``axis_lines`` says
    it cannot be drawn."""
    found = axis_lines(records, axis)
    return None if found.why_not else _figure(found)


def _figure(found: AxisLines) -> Figure:
    lines, axis = found.lines, found.axis
    figure, axes = plt.subplots(1, 2, figsize=(PAGE_INCHES, 4.2))
    for ax, metric, title in zip(axes, ("plateau", "emergence"), ("median plateau end", "median emergence step")):
        values = []
        for i, (line, points) in enumerate(lines.items()):
            x = np.array([p["value"] for p in points], dtype=float)
            median = np.array([np.nan if p[metric]["median"] is None else p[metric]["median"] for p in points])
            low = np.array([np.nan if p[metric]["low"] is None else p[metric]["low"] for p in points])
            high = np.array([p[metric]["budget"] if p[metric]["high"] is None else p[metric]["high"] for p in points])
            reached = ~np.isnan(median)
            below = median[reached] - np.where(np.isnan(low), median, low)[reached]
            ax.errorbar(x[reached], median[reached], yerr=[below, high[reached] - median[reached]],
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


def what_it_draws(found: AxisLines) -> str:
    """A drawn figure's part of its caption: the runs, the lines, what changes with the axis."""
    runs = f"{found.runs} runs that set {found.axis} ({', '.join(found.names)})"
    follows = "; ".join(f"{key} ({', '.join(map(str, values))})" for key, values in found.follows.items())
    lines = (f"{len(found.lines)} lines, one per setting of the other keys that vary" if len(found.lines) > 1
             else "one line (nothing else varies among them" + (" but what changes with the axis)" if follows else ")"))
    return (f" Drawn: the {runs}, {lines}."
            + (f" Changing with {found.axis}, value for value (so not the axis alone): {follows}." if follows else ""))


CAPTION = ("Kaplan–Meier medians over the seeds with 95% intervals, one line per setting of the other keys that vary; "
           "a triangle at the budget where the median was not reached.")


@register_figure("axes", "Plateau and emergence against a sweep axis", CAPTION,
                 f"no numeric config key varies with two or more values per line (at most {MAX_LINES} lines)")
def _axes(results: Results) -> list[Drawn]:
    found = [axis_lines(results.records, axis) for axis in numeric_axes(results.records)]
    drawn = [Drawn(_figure(one), f"against-{slug(one.axis)}", title=f"Plateau and emergence against {one.axis}",
                   caption=html.escape(CAPTION + what_it_draws(one)), alt=f"metrics vs {one.axis}")
             for one in found if not one.why_not]
    skipped = "; ".join(f"{one.axis}: {one.why_not}" for one in found if one.why_not)
    if not drawn:
        if skipped:
            raise NotDrawn(f"no numeric config key can be drawn against ({skipped})")
        return []
    if skipped:  # said once, under the first
        drawn[0].caption = (drawn[0].caption or "") + html.escape(f" Not drawn against: {skipped}.")
    return drawn
