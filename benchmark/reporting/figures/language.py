"""Language probes on a language model's checkpoints (``analyze pythia``, ``lm-family analyze``): each
probe's accuracy against the checkpoint step, one line per seed, and the best induction head's score."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure

from emergence_bench.reporting.figure import Drawn, Results, register_figure
from emergence_bench.reporting.plotting import draw_line, legend_above, panel_title, panels
from emergence_bench.results.row import Row


def language_rows(records: Sequence[Row]) -> dict[tuple[str, str], dict[int, Row]]:
    """{(model, probe): {seed: row}} of the ok rows that evaluated a probe at some checkpoints."""
    found: dict[tuple[str, str], dict[int, Any]] = {}
    for row in records:
        config: Any = row.get("config", {})
        if config.get("mixer", {}).get("name") != "pythia" or row.get("status") != "ok":
            continue
        if not row.get("emergence", {}).get("history"):
            continue
        key = (config["mixer"]["model"], config["task"]["probe"])
        found.setdefault(key, {})[int(row["seed"])] = row
    return dict(sorted(found.items()))


HEAD_PATTERNS = {"previous_token": "best previous-token head", "induction": "best induction head"}


def best_head_curve(row: Any, kind: str) -> tuple[list[int], list[float]]:
    """(steps, the best head's ``kind`` score at each) from a row's head scores (empty without)."""
    history = row.get("head_scores", {}).get("history", [])
    return [s for s, _ in history], [max(max(layer) for layer in grid[kind]) for _, grid in history]


def step_axis(ax: Any) -> None:
    """Checkpoint steps on a symlog axis (step 0 at the left edge, log beyond 1)."""
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlim(left=0)
    ax.set_xlabel("checkpoint step (log; 0 at the left)")
    ax.set_ylim(-0.03, 1.03)
    ax.grid(alpha=0.3)


def probe_figure(records: Sequence[Row]) -> Figure | None:
    """A panel per (model, probe): accuracy against step (symlog: step 0 at the left), a line per seed,
    the threshold dashed, a dot where the bisection found the emergence; then a panel per head pattern
    with each seed's best head's score. None without language rows."""
    rows = language_rows(records)
    if not rows:
        return None
    models = {model for model, _ in rows}
    scored: dict[int, Any] = {seed: row for by_seed in rows.values() for seed, row in by_seed.items()
                              if best_head_curve(row, "induction")[0]}
    figure, axes = panels(len(rows) + (len(HEAD_PATTERNS) if scored else 0), columns=3, height=3.0)
    seeds = sorted({seed for by_seed in rows.values() for seed in by_seed})
    colour = {seed: f"C{i % 10}" for i, seed in enumerate(seeds)}
    for ax, ((model, probe), by_seed) in zip(axes, rows.items()):
        threshold = None
        for seed, row in sorted(by_seed.items()):
            e = row["emergence"]
            draw_line(ax, [s for s, _ in e["history"]], [a for _, a in e["history"]], color=colour[seed], linewidth=1.3)
            if e.get("first_solved") is not None:
                ax.plot([e["first_solved"]], [dict(e["history"])[e["first_solved"]]], "o", color=colour[seed], ms=5)
            threshold = e["threshold"]
        if threshold is not None:
            ax.axhline(threshold, color="grey", linestyle="--", linewidth=0.9)
        name = probe.replace("_", " ")
        panel_title(ax, name if len(models) == 1 else f"{name} · {model.rstrip('/').rsplit('/', 1)[-1]}")
        step_axis(ax)
        ax.set_ylabel("greedy accuracy")
    for ax, (kind, title) in zip(axes[len(rows):] if scored else [], HEAD_PATTERNS.items()):
        for seed, row in sorted(scored.items()):
            draw_line(ax, *best_head_curve(row, kind), color=colour[seed], linewidth=1.3)
        jump = next(iter(scored.values()))["head_scores"]["jump_threshold"]
        ax.axhline(jump, color="grey", linestyle=":", linewidth=0.9)
        panel_title(ax, title)
        step_axis(ax)
        ax.set_ylabel("score (attention mass)")
    figure.tight_layout()
    handles = [ax.plot([], [], color=colour[s])[0] for s in seeds]
    labels = [f"seed {s}" for s in seeds]
    handles += [axes[0].plot([], [], color="grey", linestyle="--")[0], axes[0].plot([], [], "o", color="grey")[0]]
    labels += ["solved threshold", "emergence (bisection)"]
    if scored:
        handles.append(axes[0].plot([], [], color="grey", linestyle=":")[0])
        labels.append("a head has the pattern")
    legend_above(figure, handles, labels, columns=min(len(labels), 8))
    return figure


def draw(results: Results) -> list[Drawn]:
    figure = probe_figure(results.records)
    return [Drawn(figure, "language-probes")] if figure else []


register_figure("language", "Language probes across checkpoints",
                "One panel per probe: the share of its prompts answered greedily right at each checkpoint, one "
                "line per seed (the model's init seed), the step axis logarithmic with step 0 at the left; dashed, "
                "the accuracy that counts as solved; a dot, the first solved checkpoint the bisection found. The "
                "last two panels, on a repeated random string: at each checkpoint, the highest previous-token "
                "score of any head (its attention mass on the position before the query) and the highest "
                "induction score (its mass on the token after the query's token's earlier copy); dotted, the "
                "score from which a head counts as having the pattern.",
                "no language-model rows (analyze pythia or lm-family analyze)")(draw)
