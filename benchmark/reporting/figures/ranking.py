"""The ranking's section: its tables and ladder figure (success and the first loss drop against the
rung), and the figures drawn with it: tuning curves, survival by rung, the plateau forest, state size."""

from __future__ import annotations

import html

from matplotlib.figure import Figure

from emergence_bench.config import ConfigError
from emergence_bench.reporting import rank, rank_tables
from emergence_bench.reporting.figure import Drawn, NotDrawn, Results, register_figure
from emergence_bench.reporting.figures import comparison
from emergence_bench.reporting.figures.tuning_curves import tuning_figure
from emergence_bench.reporting.plotting import PAGE_INCHES, legend_above, plain_log, plt
from emergence_bench.reporting.rows_to_rank import rows_to_rank, saved_rank
from emergence_bench.results.store import TUNING_DIR, read_tables


def ladder_figure(ranked: dict) -> Figure | None:
    """Per task family (columns): success rate vs rung per mixer with 95% Wilson intervals (top), and
    the median end of the held plateau vs rung on a log axis (bottom), a median not reached (still
    held) drawn as an arrow at the budget, a cell without train-loss curves (a slim reference row) left
    out. None when no family has more than one rung."""
    ladders = {f: ladder for f, ladder in ranked["ladders"].items() if len(ladder["rungs"]) > 1}
    if not ladders:
        return None
    cells = ranked["cells"]
    mixers = sorted(cells["mixer"].unique())
    figure, axes = plt.subplots(2, len(ladders), figsize=(PAGE_INCHES, 6.5), squeeze=False)
    for column, (family, ladder) in enumerate(sorted(ladders.items())):
        top, bottom = axes[0, column], axes[1, column]
        plateaus = 0  # cells with a plateau drawn in this family
        for i, mixer in enumerate(mixers):
            rows = cells[(cells["family"] == family) & (cells["mixer"] == mixer)].sort_values("rung_index")
            rows = rows[rows["success_rate"].notna()]
            if rows.empty:
                continue
            x = rows["rung_index"] + (i - (len(mixers) - 1) / 2) * 0.06  # side by side, not on top of each other
            rate = rows["success_rate"]
            top.errorbar(x, rate, yerr=[rate - rows["success_low"], rows["success_high"] - rate], marker="o",
                         capsize=3, color=f"C{i}", label=mixer)
            curves = rows["runs_with_curves"].fillna(0) > 0
            reached = rows["median_held_plateau_end"].notna() & curves
            bottom.plot(x[reached], rows["median_held_plateau_end"][reached], marker="o", color=f"C{i}", label=mixer)
            bottom.scatter(x[~reached & curves], rows["budget"][~reached & curves], marker="^", s=60, color=f"C{i}")
            plateaus += int(curves.sum())
        for ax in (top, bottom):
            ax.set_xticks(range(len(ladder["rungs"])), [str(r) for r in ladder["rungs"]])
            ax.set_xlabel(ladder["axis"])
        top.set_ylim(-0.05, 1.05)
        top.set_title(family)
        top.set_ylabel("success rate (emerged)")
        if plateaus:
            plain_log(bottom)
        else:  # no cell kept a train-loss curve (slim reference rows): nothing to draw
            bottom.text(0.5, 0.5, "no train-loss curves", ha="center", va="center", transform=bottom.transAxes)
        bottom.set_ylabel("median plateau end\n(▲: still held, at budget)")
    figure.tight_layout()
    handles, labels = axes[0, 0].get_legend_handles_labels()
    legend_above(figure, handles, labels, columns=min(len(labels), 7))  # not on the first family's lines
    return figure


@register_figure("ranking", "Ranking", "",
                 "no task family varies one numeric task key over two or more mixers (see `rank`; one mixer's "
                 "ladder: `report DIR --reference builtin` ranks it beside the built-ins)")
def _ranking(results: Results) -> list[Drawn]:
    """The ranking's tables and ladder figure, where the results (with a reference's rows for the
    mixers they lack: ``rows_to_rank``) hold a ladder (``rank``)."""
    rows, results.reference_data, axes = rows_to_rank(results.records, results.root, results.reference)
    try:
        ranked = rank.build(rows, axes, learning_speed=saved_rank(results.root).get("learning_speed") or ())
    except rank.MixedSettings as why:  # two budgets in one cell: said in the page, as `rank` says it
        raise NotDrawn(f"not ranked: {why}") from None
    except ConfigError:  # no single ladder per family: the sweep is not a ranking
        return []
    figure = ladder_figure(ranked)
    if figure is None or ranked["ranking"]["mixer"].nunique() < 2:
        if figure is not None:
            plt.close(figure)
        return []
    results.ranked, results.ranked_rows = ranked, rows
    tables = rank_tables.tables(ranked)
    return [Drawn(figure, "ranking", caption=html.escape(rank_tables.ranking_note(ranked["baseline"])),
                  alt="success and plateau end vs rung",
                  html=(tables["ranking"].html(), "<h3>Frontier per task family</h3>", tables["frontier"].html(),
                        "<p>Top: success rate per rung with 95% Wilson intervals, one line per mixer. Bottom: the "
                        "median end of the held plateau (the loss held at one level until its last sharp drop) per "
                        "rung on a log axis, from the runs that kept a train-loss curve; a triangle at the budget "
                        "where the plateau was still held (the median not reached).</p>"))]


@register_figure("tuning", "Tuning curves",
                 "Per task family, each mixer's success area on the tuning rung(s) against its learning rate, on the "
                 "tuning seeds, with 95% Wilson intervals (mixers offset a little sideways where they overlap); the "
                 "large dot is the lr the ranking used (the choice rule: area, then the median emergence step, then "
                 "the smaller lr), hollow where it lies on an edge of the grid even after widening. A small hollow "
                 "dot is a pruned lr: stopped once the rule could no longer choose it, at the area it had reached.",
                 "no tuning table: the runs were not tuned here (DIR/tuning) nor at the shipped reference's values",
                 part_of="ranking")
def _tuning(results: Results) -> list[Drawn]:
    tables = read_tables(results.root / TUNING_DIR) if results.root else []  # DIR's own (a plugin's)
    have = {(t["mixer"], t["group"]) for t in tables}
    tables += rank.reference_tuning(results.reference_data, results.ranked_rows or results.records, have)
    figure = tuning_figure(tables)
    return [Drawn(figure, "tuning-curves", alt="success area against learning rate")] if figure else []


@register_figure("survival", "Survival by rung",
                 "Per rung, the fraction of each mixer's seeds not yet emerged (upper row of a family) and still on "
                 "its plateau (the loss held at one level until its last sharp drop; lower row) against step: "
                 "Kaplan–Meier curves, a tick where a run stopped before the event (censored). A curve that falls "
                 "earlier is a mixer that finds the pattern sooner. Runs without a train-loss curve (slim reference "
                 "rows) have no plateau line.",
                 "no ranked runs", part_of="ranking")
def _survival(results: Results) -> list[Drawn]:
    figure = comparison.survival_figure(results.ranked, results.ranked_rows) if results.ranked else None
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
        "not reached within the budget). Left of the dashed line: a shorter plateau."))]


STATE_CAPTION = ("Success score and plateau ratio against the state each mixer carries per sequence at inference "
                 "(attention's grows with the sequence; the largest in the ranking is drawn); each mixer's marker "
                 "is named in the legend.")


@register_figure("state", "State size and quality", STATE_CAPTION,
                 "fewer than two mixers record their state size (runs from before state_size was recorded, or "
                 "plugins whose mixers do not state it)", part_of="ranking")
def _state(results: Results) -> list[Drawn]:
    figure = comparison.state_figure(results.ranked) if results.ranked else None
    if figure is None or results.ranked is None:
        return []
    unknown = comparison.unknown_state(results.ranked)
    said = (f" {html.escape(', '.join(unknown))}: state unknown (the mixer does not state its state_size), so no "
            "place on the state axis; drawn as a dashed line at its value across each panel.") if unknown else ""
    if len(figure.axes) == 1:  # the plateau ratio's panel needs two mixers with one
        said += (" Only the success score is drawn: fewer than two mixers have a plateau ratio (runs without "
                 "train-loss curves, or no baseline).")
    return [Drawn(figure, "state", caption=STATE_CAPTION + said)]
