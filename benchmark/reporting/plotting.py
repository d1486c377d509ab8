"""What every figure of the report shares: the page's width and resolution, the text sizes, and
small drawing helpers (a grid of panels, titles that name only what varies, plain log axes)."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

# Every figure is drawn at the page's width (PAGE_INCHES at DPI: 1200 pixels, the page's max-width), so
# it is shown at 100% and its text at the sizes below is readable without zooming.
DPI, PAGE_INCHES = 96, 12.5

STYLE = {"font.size": 10, "axes.titlesize": 10.5, "axes.labelsize": 10, "xtick.labelsize": 9, "ytick.labelsize": 9,
         "legend.fontsize": 9, "figure.titlesize": 11}

plt.style.use(STYLE)  # this module only draws reports (and runs headless: Agg above)


def slug(text: str) -> str:
    """``text`` as a file name: lower case, runs of other characters as one dash."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80] or "figure"


def panels(n: int, columns: int = 3, height: float = 3.2) -> tuple[Figure, list[Any]]:
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


def panel_title(ax: Axes, text: str, width: int = 48) -> None:
    """A panel title wrapped to its panel (``width`` characters a line), never over its neighbour."""
    if text:
        ax.set_title("\n".join(textwrap.wrap(text, width)) or text)


def plain_log(ax: Axes, axis: str = "y") -> None:
    """A log axis with plain tick labels (50, 100, 200; 0.001), not 2×10², and few enough of them to
    read: per decade 1; 1, 2, 5; or 1 to 9, whichever gives 3 to 8 labels over the data's span (a
    span inside one decade: plain evenly spaced values). Call it after drawing the data."""
    which = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    low, high = ax.get_ylim() if axis == "y" else ax.get_xlim()
    which.set_major_locator(_log_locator(min(low, high), max(low, high)))
    which.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    which.set_minor_formatter(ticker.NullFormatter())


def _log_locator(low: float, high: float) -> ticker.Locator:
    """Major ticks for a log axis over [low, high]: the first choice of ticks per decade that puts 3 to
    8 inside; many decades: whole decades, skipped to at most 8; within a decade: plain values."""
    def inside(subs: tuple[float, ...]) -> int:
        decades = range(int(np.floor(np.log10(low))), int(np.ceil(np.log10(high))) + 1)
        return sum(low <= s * 10.0 ** d <= high for d in decades for s in subs)

    if not (0 < low < high):
        return ticker.LogLocator(base=10, numticks=8)
    if inside((1.0,)) > 8:  # many decades: whole ones, some skipped
        return ticker.LogLocator(base=10, numticks=8)
    for subs in ((1.0,), (1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0), (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)):
        if inside(subs) >= 3:  # at most 8: fewer decades than the previous choice needed
            return ticker.LogLocator(base=10, subs=subs, numticks=12)
    return ticker.MaxNLocator(nbins=4)  # the span lies within a decade: ticks at plain values


def legend_above(figure: Figure, handles: list[Any], labels: list[str], columns: int | None = None) -> None:
    """One legend for the whole figure, above its panels, where it covers no data; call it after
    ``tight_layout`` (the page saves with a tight bounding box, which keeps the space above)."""
    figure.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 1.0),
                  ncol=columns or min(len(labels), 4), frameon=False)


def legend_below(figure: Figure, handles: list[Any], labels: list[str], columns: int | None = None) -> None:
    """As ``legend_above``, below the panels (under their axis labels); call it after ``tight_layout``."""
    figure.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                  ncol=columns or min(len(labels), 4), frameon=False)


def log_label(ax: Axes, text: str, axis: str = "y") -> None:
    """Label an axis ``text``, followed by "(log)" only where the axis is log-scaled."""
    scale = ax.get_yscale() if axis == "y" else ax.get_xscale()
    (ax.set_ylabel if axis == "y" else ax.set_xlabel)(f"{text} (log)" if scale == "log" else text)


def draw_line(ax: Axes, x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, **style: Any) -> None:
    """A curve; with fewer than three points also its markers, so a one-point curve is still seen."""
    if len(x) < 3:
        style.setdefault("marker", "o")
    ax.plot(x, y, **style)
