"""One figure per claim of the paper judged on the folder (``emergence-bench claims``): each arm's
per-run values, the effect with its interval and the verdict."""

from __future__ import annotations

import html
import math

import numpy as np
from matplotlib.figure import Figure

from emergence_bench.claims.claim import Evidence
from emergence_bench.claims.judge import ScoreRow
from emergence_bench.reporting.figure import Drawn, Results, register_figure
from emergence_bench.reporting.plotting import PAGE_INCHES, plt
from emergence_bench.reporting.scorecard import effect_cell, number

VERDICT_COLOURS = {"agrees": "C2", "disagrees": "C3", "inconclusive": "C7"}


def strip(evidence: Evidence, verdict: str) -> Figure:
    """Each arm's values as a column of dots (a run that never got there: a triangle above the rest,
    labelled "never"), each arm's median as a bar."""
    arms = list(evidence.data.items())
    figure, ax = plt.subplots(figsize=(PAGE_INCHES * 0.75, 3.4))
    figure.subplots_adjust(right=0.7)  # room for the guides' labels beside the axes
    finite = [v for _, values in arms for v in values if math.isfinite(v)] + list(evidence.guides.values())
    top = max(finite, default=1.0)
    ceiling = top * 1.12 if top > 0 else 1.0
    rng = np.random.default_rng(0)
    for i, (_, values) in enumerate(arms):
        shown = [v for v in values if math.isfinite(v)]
        never = len(values) - len(shown)
        ax.scatter(i + rng.uniform(-0.12, 0.12, len(shown)), shown, s=18, color="C0", zorder=3)
        if never:
            ax.scatter(i + rng.uniform(-0.12, 0.12, never), [ceiling] * never, marker="^", s=26, color="C3", zorder=3)
        if values:
            middle = float(np.median(values))
            ax.hlines(min(middle, ceiling), i - 0.3, i + 0.3, color="k", linewidth=1.5, zorder=2)
    if any(not math.isfinite(v) for _, values in arms for v in values):
        ax.axhline(ceiling, color="C3", linewidth=0.6, linestyle=":")
        ax.text(len(arms) - 0.5, ceiling, " never", color="C3", va="center", ha="left", fontsize=8, clip_on=False)
    for label, value in evidence.guides.items():
        ax.axhline(value, color="C1", linewidth=0.8, linestyle="--", zorder=1)
        ax.text(len(arms) - 0.5, value, f" {label}", color="C1", va="center", ha="left", fontsize=8, clip_on=False)
    ax.set_xticks(range(len(arms)), [name for name, _ in arms])
    ax.set_xlim(-0.5, len(arms) - 0.5)
    ax.margins(y=0.12)
    ax.set_title(verdict, color=VERDICT_COLOURS.get(verdict, "k"), fontsize=10, loc="right")
    return figure


def scorecard_table(card: list[ScoreRow]) -> str:
    """The scorecard as an HTML table: claim, effect [95%], p (Holm), verdict, why."""
    rows = "".join(
        f"<tr><td>{html.escape(r['claim'])}</td><td>{html.escape(effect_cell(r))}</td>"
        f"<td>{number(r['p_holm'], '.2g')}</td><td><b>{r['verdict']}</b></td><td>{html.escape(r['reason'])}</td></tr>"
        for r in (row.to_dict() for row in card))
    return ("<table><tr><th>claim</th><th>effect [95%]</th><th>p (Holm)</th><th>verdict</th><th>why</th></tr>"
            f"{rows}</table>")


@register_figure("claims", "The paper's claims", "Each claim of the paper as a pre-registered test on this folder's "
                 "confirmation runs (`emergence-bench claims DIR`; docs/claims.md): one dot per run, a bar at each "
                 "arm's median, a triangle for a run that never got there.",
                 "no claims-cpu-v2 group in the folder (the claims read its groups)")
def draw(results: Results) -> list[Drawn]:
    from emergence_bench.claims.judge import judge_folder

    if results.root is None:
        return []
    try:
        card = judge_folder(results.root)
    except ValueError:
        return []
    judged = [r for r in card if isinstance(r.outcome, Evidence) and r.outcome.data]
    if not judged:
        return []
    drawn = []
    for i, row in enumerate(judged):
        data = row.to_dict()
        evidence = row.outcome
        assert isinstance(evidence, Evidence)
        title = f"Claim {row.claim.number}: {data['claim']}"
        caption = (f"{html.escape(row.claim.paper)} Effect: {html.escape(row.claim.effect)} = "
                   f"{html.escape(effect_cell(data))}; {html.escape(row.claim.statistic)}, p (Holm) "
                   f"{number(row.p_adjusted, '.2g')}; {html.escape(row.reason)}. {html.escape(evidence.details)}")
        drawn.append(Drawn(strip(evidence, row.verdict), f"claim-{data['claim']}", title=title, caption=caption,
                           html=(scorecard_table(card),) if i == 0 else ()))
    return drawn
