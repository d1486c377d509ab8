"""The emergence step of every seed, one column per leaderboard group."""

from __future__ import annotations

import textwrap

import numpy as np
from matplotlib.figure import Figure

from emergence_bench.reporting.figure import from_groups, register_figure
from emergence_bench.reporting.plotting import PAGE_INCHES, legend_above, plain_log, plt, short_titles
from emergence_bench.results.row import ResultRow, emergence_step, step_budget


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


NEVER_ABOVE = 1.6  # the "never" row's height over the largest budget, on the log axis


def seed_scatter(groups: list[tuple[str, list[ResultRow]]]) -> Figure | None:
    """Emergence step per seed, one column per leaderboard row, on a log axis: dots for seeds that
    emerged (a seed that emerged at its last step included), triangles in a row of their own labelled
    "never", above the largest budget (dotted), for seeds that never did. Different seeds, different
    steps."""
    columns = seed_columns(groups)
    if not columns:
        return None
    figure, ax = plt.subplots(figsize=(PAGE_INCHES, 4.2))
    rng = np.random.default_rng(0)
    budget = max([s for _, emerged, never in columns for s in emerged + never]
                 + [m["config"]["trainer"]["max_steps"] for _, members in groups for m in members])
    never_at = budget * NEVER_ABOVE
    for i, (_, emerged, never) in enumerate(columns):
        ax.scatter(i + rng.uniform(-0.15, 0.15, len(emerged)), [max(1, s) for s in emerged], color="C0", s=20)
        ax.scatter(i + rng.uniform(-0.15, 0.15, len(never)), [never_at] * len(never), color="C3", marker="^", s=28)
    ax.axhline(budget, color="grey", linestyle=":", linewidth=0.9)
    ax.scatter([], [], color="C0", s=20, label="emerged")
    ax.scatter([], [], color="C3", marker="^", s=28, label="never emerged within its budget")
    ax.plot([], [], color="grey", linestyle=":", label=f"the largest budget ({budget:g} steps)")
    plain_log(ax)
    ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= budget]
    ax.set_yticks(ticks + [never_at], [f"{t:g}" for t in ticks] + ["never"])
    ax.minorticks_off()
    ax.set_xlim(-0.5, len(columns) - 0.5)
    titles, _ = short_titles([label for label, _, _ in columns])
    many = len(columns) > 6  # then rotated, one line each: parallel labels never overprint
    ax.set_xticks(range(len(columns)), [t if many else "\n".join(textwrap.wrap(t, 24)) for t in titles],
                  rotation=45 if many else 0, ha="right" if many else "center", rotation_mode="anchor")
    ax.set_ylabel("emergence step (log)")
    figure.tight_layout()
    legend_above(figure, *ax.get_legend_handles_labels())
    return figure


register_figure("seeds", "Emergence step per seed",
                "One column per leaderboard row, one dot per seed (log axis); a triangle in the top row, "
                "\"never\", above the largest budget (dotted), marks a seed that never emerged. The spread within a "
                "column is how much the step depends on the seed alone.",
                "no run finished (ok or diverged)")(
    from_groups(seed_scatter, "emergence-per-seed"))

