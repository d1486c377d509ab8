"""The ranking's tables, as `rank` prints them and the report shows them: the overall ranking (both
scores, each mixer's lr per family with "none works" where no tuned value made a run emerge), each
family's frontier and abruptness per mixer, and every cell, with the notes that say how to read
them. Reads what ``rank.build`` computed (and ``rank.write`` added: the tuning tables); computes
nothing of its own but the per-family abruptness it pools from the cells.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from typing import Any

import pandas as pd

from emergence_bench.reporting.table import Table
from emergence_bench.results.store import none_works


def _lr_cell(by_family: dict[str, list[float]], families: list[str], none_work: Collection[str] = ()) -> str:
    """``1e-3`` where every family used one rate, else each family's, in the table's family order; a
    family whose tuning found no rate that works says so ("1e-4 none works")."""
    values = [(",".join(f"{v:.0e}".replace("e-0", "e-") for v in by_family.get(f, [])) or "-")
              + (" none works" if f in none_work else "") for f in families]
    return values[0] if len(set(values)) == 1 else " / ".join(values)


def _value(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # a count in a column that also holds a missing value (pandas made it float)
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _frontier(row: Any) -> str:  # a row of the frontier table (pandas itertuples)
    """``8 [4, 16]``: the frontier and its interval; ``<first`` when even the first rung fails."""
    point, low, high = ("<first" if pd.isna(v) else _value(v) for v in (row.frontier, row.frontier_low,
                                                                          row.frontier_high))
    return f"{point} [{low}, {high}]"


def _median(value: float | None, budget: float) -> str:
    return f">{budget:g}" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:g}"


def _ratio(ratio: float | None, low: float | None, high: float | None, bound: str = "") -> str:
    """``1.8× [1.2, 2.6]``; ``-`` when there is none."""
    if ratio is None or (isinstance(ratio, float) and math.isnan(ratio)):
        return "-"
    return f"{bound}{ratio:.2g}× [{low:.2g}, {high:.2g}]"


def ranking_note(baseline: str | None) -> str:
    """What the ranking table's two scores mean (the caption above it)."""
    return ("Success score: the mean over task families of the area under success vs rung (0 to 1); equal ranks "
            "are ties (within the 95% margin of that rank's first mixer). Plateau ratio: the geometric mean over "
            "cells of the Kaplan–Meier median end of the held plateau (the loss held at one level until its last "
            f"sharp drop) over {baseline or 'the baseline'}'s, 95% bootstrap interval (below 1: a shorter plateau). "
            "The first drop from chance is per cell, below.")


LEARNING_SPEED_NOTE = ("{families}: families where no rung shows the phenomenon (a held plateau and an abrupt drop, "
                       "by the suite's own measure), so their success is the speed of smooth learning, not emergence: "
                       "each mixer's area under success vs rung, outside the success score (docs/ranking.md).")

FRONTIER_NOTE = ("The hardest rung with success ≥ 50%, [interval]: the hardest rung whose Wilson interval lies "
                 "above 50%, and the hardest whose interval reaches it.")


def _abrupt(row: Any) -> str:  # a row of the cells table (pandas itertuples): by the rule, then by the share
    drops = getattr(row, "cells_with_drop", None)
    rule = "-"
    if drops is not None and not pd.isna(drops) and drops:
        onset = getattr(row, "median_onset", None)
        rule = f"{int(row.abrupt_cells_rule)}/{int(drops)}" + (
            "" if onset is None or pd.isna(onset) else f" (onset {onset:.0f}, {row.median_decades:.2f} dec)")
    share = getattr(row, "median_transition_share", None)
    return rule + ("" if share is None or pd.isna(share) else f"; share {share:.2f}")


ABRUPTNESS_NOTE = ("Per mixer and family, over its rungs: the output cells abrupt by the rule (a plateau then a "
                   "logistic drop beats a power law and an exponential from step 0 by BIC ≥ 10, within 0.3 decades, "
                   "after at least 3 evals), of those whose loss fell by a tenth of chance − floor, with the median "
                   "width in decades of the abrupt ones, and the median share (the drop's width over the time to its "
                   "end: small for a late drop, so tied to timing). As fine as the evals: a drop between two evals "
                   "reads as wide as the evals around it (docs/ranking.md, \"The abruptness rule\").")


def family_abruptness(cell_rows: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(mixer, family) -> "abrupt by the rule/with a drop (median decades; share)" over the family's
    rungs, "-" where no rung recorded a drop."""
    found = {}
    for (mixer, family), group in cell_rows.groupby(["mixer", "family"], sort=True):
        numbers = {key: pd.to_numeric(group[key], errors="coerce") if key in group else pd.Series(dtype=float)
                   for key in ("cells_with_drop", "abrupt_cells_rule", "median_decades", "median_transition_share")}
        with_drop = int(numbers["cells_with_drop"].fillna(0).sum())
        if not with_drop:
            found[(mixer, family)] = "-"
            continue
        abrupt = int(numbers["abrupt_cells_rule"].fillna(0).sum())
        decades, shares = numbers["median_decades"].dropna(), numbers["median_transition_share"].dropna()
        detail = [f"{decades.median():.2f} dec"] if len(decades) else []
        detail += [f"share {shares.median():.2f}"] if len(shares) else []
        found[(mixer, family)] = f"{abrupt}/{with_drop}" + (f" ({'; '.join(detail)})" if detail else "")
    return found


def cells_note(baseline: str | None) -> str:
    return ("Plateau: the median step where the loss, held at one level, starts its last sharp drop (`>budget`: "
            "still held), with the runs whose plateau is worth the name (held at least half the time to its end and "
            "twice as long as its drop) of those with a recorded curve. Plateau ratio: the cell's median plateau end "
            f"over {baseline or 'the baseline'}'s on the same rung, [95% bootstrap interval]; `>`: this mixer's "
            "median not reached within the budget (a lower bound), `<`: the baseline's. Median first drop: the first "
            "step the smoothed loss falls just under chance (or the shortcut). Abrupt cells: by the rule (the model "
            "comparison: abrupt of those with a drop, the median onset and width in decades of the abrupt ones), then "
            "the median share (the drop's width over the time to its end; docs/ranking.md says both).")


def tables(ranked: dict) -> dict[str, Table]:
    """The ranking's tables: ``ranking`` (both scores, the area per family), ``frontier`` and
    ``abruptness`` (per mixer and family) and ``cells`` (every mixer, family and rung)."""
    ranking, scores, cell_rows, ladder = ranked["ranking"], ranked["families"], ranked["cells"], ranked["ladders"]
    families, baseline = sorted(ladder), ranked.get("baseline")
    speed = [f for f in families if f in (ranked.get("learning_speed") or [])]
    scored = [f for f in families if f not in speed]
    none_work: dict[str, set[str]] = {}  # mixer -> the families where no tuned value made a run emerge
    for table in ranked.get("tuning", []):
        if none_works(table):
            none_work.setdefault(table["mixer"], set()).add(table["family"])
    overall_rows, speed_rows = [], []
    for row in ranking.to_dict("records"):
        areas = [_value(row.get(f"area:{f}")) for f in scored]
        speed_rows.append([row["mixer"], *(_value(row.get(f"area:{f}")) for f in speed)])
        plateau = _ratio(row.get("held_plateau_ratio"), row.get("held_plateau_low"), row.get("held_plateau_high"),
                         row.get("held_plateau_bound") or "")
        if row["mixer"] == baseline:
            plateau = "1 (baseline)"
        overall_rows.append([f"{row['rank']}{' (tie)' if row['tied_with'] else ''}", row["mixer"],
                             _lr_cell(ranked.get("lr", {}).get(row["mixer"], {}), families,
                                      none_work.get(row["mixer"], set())),
                             _value(row["parameters"]), _value(row.get("state_size")),
                             f"{row['score']:.2f} ± {row['score_se']:.2f}", plateau, *areas])
    frontier_rows, abrupt_rows = [], []
    abruptness = family_abruptness(cell_rows) if len(cell_rows) else {}
    for mixer, group in scores.groupby("mixer", sort=True):
        by_family = {row.family: row for row in group.itertuples()}
        frontier_rows.append([mixer, *(_frontier(by_family[f]) if f in by_family else "-" for f in families)])
        abrupt_rows.append([mixer, *(abruptness.get((mixer, f), "-") for f in families)])
    plateau_cells = {(r["mixer"], r["family"], json.dumps(r["rung"])): r
                     for r in ranked.get("held_plateau", pd.DataFrame()).to_dict("records")}
    rung_rows = []
    for row in cell_rows.itertuples():
        success = "-" if pd.isna(row.success_rate) else \
            f"{row.emerged}/{row.seeds - row.failed} ({row.success_low:.2f}–{row.success_high:.2f})"
        cell = plateau_cells.get((row.mixer, row.family, json.dumps(row.rung)), {})
        ratio = "-" if row.mixer == baseline else _ratio(cell.get("ratio"), cell.get("low"), cell.get("high"),
                                                           cell.get("bound", ""))
        held = (f"{_median(row.median_held_plateau_end, row.budget)} ({row.held_plateaus}/{row.runs_with_curves})"
                if row.runs_with_curves else "-")  # median held-plateau end (worth the name / with a curve)
        rung_rows.append([row.family, f"{row.axis or '-'}={_value(row.rung)}", row.mixer, str(row.seeds), success,
                          _median(row.median_emergence_step, row.budget), held, ratio,
                          _median(row.median_first_drop, row.budget), _abrupt(row)])
    return {
        "ranking": Table(["rank", "mixer", f"lr ({' / '.join(families)})" if len(families) > 1 else "lr",
                          "parameters", "state (numbers/seq)", "success score ± se", "plateau ratio [95%]",
                          *(f"{f} area" for f in scored)], overall_rows),
        "learning_speed": Table(["mixer", *(f"{f} area" for f in speed)], speed_rows if speed else []),
        "frontier": Table(["mixer", *(f"{f} ({ladder[f]['axis'] or '-'})" for f in families)], frontier_rows),
        "abruptness": Table(["mixer", *families], abrupt_rows),
        "cells": Table(["family", "rung", "mixer", "seeds", "success (95% interval)", "median emergence",
                        "plateau: median end (worth the name)", "plateau ratio", "median first drop",
                        "abrupt cells: by the rule (onset, decades); share"], rung_rows),
    }


def to_markdown(ranked: dict) -> str:
    """The overall ranking (both scores), each family's frontier and area per mixer, and every cell."""
    baseline, parts = ranked.get("baseline"), tables(ranked)
    speed = ranked.get("learning_speed") or []
    speed_part = ["", "## Learning speed (not in the score)", "", LEARNING_SPEED_NOTE.format(families=", ".join(speed)),
                  "", parts["learning_speed"].markdown()] if speed else []
    return "\n".join(["## Ranking", "", ranking_note(baseline), "", parts["ranking"].markdown(), *speed_part,
                      "", "## Frontier per task family", "", FRONTIER_NOTE, "", parts["frontier"].markdown(),
                      "", "## Abruptness per task family", "", ABRUPTNESS_NOTE, "", parts["abruptness"].markdown(),
                      "", "## Cells", "", cells_note(baseline), "", parts["cells"].markdown()]) + "\n"
