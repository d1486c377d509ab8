"""The language family's induction-head pilot (``lm-family pilot``): per configuration, the best head's
induction score against the training tokens, with the law's prediction marked (analysis/lm_pilot.py).

Not a page of the report (the report draws result rows; the pilot's summary is its own file):
`lm-family pilot` draws it beside its table, as OUT/pilot.png."""

from __future__ import annotations

import io
from pathlib import Path

from matplotlib.figure import Figure

from emergence_bench.reporting.plotting import DPI, draw_line, legend_below, panel_title, panels, plt
from emergence_bench.results.atomic import write_atomic

PANELS = {1: "best induction head", 2: "best previous-token head"}  # the curve's column in each point


def pilot_figure(summary: dict) -> Figure | None:
    """Two panels against training tokens (log): the best head's induction score and its previous-token
    score at each checkpoint, a line per configuration; each configuration's law prediction a dashed
    vertical line in its colour, with a marker at the top; on the induction panel, the threshold
    (dotted) and uniform attention's score (grey), and a dot where an induction head formed. None
    before any checkpoint is scored."""
    arms = [a for a in summary["arms"] if any(tokens > 0 for tokens, *_ in a["curve"])]
    if not arms:
        return None
    figure, axes = panels(len(PANELS), columns=2, height=4.2)
    colour = {a["name"]: f"C{i % 10}" for i, a in enumerate(arms)}
    for ax, (column, title) in zip(axes, PANELS.items()):
        for i, a in enumerate(arms):
            points = [p for p in a["curve"] if p[0] > 0]  # step 0 has no place on a log axis
            draw_line(ax, [p[0] for p in points], [p[column] for p in points], color=colour[a["name"]], linewidth=1.4)
            ax.axvline(a["predicted_tokens"], color=colour[a["name"]], linestyle="--", linewidth=1.0, alpha=0.8)
            # A marker at the top, a little lower for each: configurations that share an N all show.
            ax.plot([a["predicted_tokens"]], [0.99 - 0.035 * i], "v", color=colour[a["name"]], ms=6)
            if column == 1 and a["formed_tokens"]:
                ax.plot([a["formed_tokens"]], [dict((p[0], p[1]) for p in points)[a["formed_tokens"]]], "o",
                        color=colour[a["name"]], ms=6)
        if column == 1:
            ax.axhline(summary["threshold"], color="black", linestyle=":", linewidth=1.0)
            ax.axhline(summary["uniform"]["induction"], color="grey", linewidth=0.8, alpha=0.7)
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("training tokens (log)")
        ax.set_ylabel("score (attention mass)")
        ax.grid(alpha=0.3)
        panel_title(ax, f"{title}, on the fixed probe (T = {summary['probe_length']})", width=70)
    figure.tight_layout()
    handles = [axes[0].plot([], [], color=colour[a["name"]])[0] for a in arms]
    labels = [f"{a['name']} (N = {a['predicted_tokens'] / 1e6:.1f}M)" for a in arms]
    styles: list[dict] = [{"color": "grey", "linestyle": "--"}, {"color": "black", "linestyle": ":"}, {"color": "grey"},
                          {"color": "grey", "marker": "o", "linestyle": "none"}]
    handles += [axes[0].plot([], [], **style)[0] for style in styles]
    labels += ["the law's prediction N (dashed, the configuration's colour)", f"formed: score ≥ {summary['threshold']}",
               "uniform attention", "formed here"]
    legend_below(figure, handles, labels, columns=3)
    return figure


def write_pilot_figure(summary: dict, path: Path) -> bool:
    """Draw the pilot's figure into ``path`` (PNG, written whole); False when there is nothing to draw."""
    figure = pilot_figure(summary)
    if figure is None:
        return False
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(figure)
    data = buffer.getvalue()
    write_atomic(path, lambda file: file.write(data))
    return True
