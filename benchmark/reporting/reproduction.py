"""Two result sets of one ladder compared: does a ranking reproduce?

The sets are, say, disjoint seeds (0–7 against 8–15), or the same seeds trained in another float order
(``trainer.batch_order: reversed``, which only reorders float sums). A different float order is another
draw of the same randomness the seed draws (the runs part ways at the first rounding and never meet
again), so a ranking cannot reproduce bit for bit: it must reproduce *as a distribution*. Compared:

- per cell (mixer, family, rung) the two sets share: emerged/n in each, the two-sided Fisher exact p
  of the difference, and each set's Kaplan–Meier median emergence step (``rank.cells``);
- the summary: the cells that differ at p < 0.05 (raw and Holm-adjusted) next to the most chance
  explains, the cells whose success count changed, and how far the medians moved;
- the tiers: the pairs of mixers the two overall rankings order oppositely, each mixer's rank and
  score in both; and per family each mixer's area in both.

A cell only one set has is named, not compared. ``compare`` returns plain JSON-ready data (no NaN);
``render`` writes it as Markdown; ``write`` does both for two results folders.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pandas as pd

from emergence_bench.config import ConfigError
from emergence_bench.reporting import rank
from emergence_bench.reporting.table import Table
from emergence_bench.results.atomic import write_files
from emergence_bench.results.row import ResultRow
from emergence_bench.results.store import TUNING_DIR, json_text, load_records
from emergence_bench.stats.significance import fisher_exact, holm

ALPHA = 0.05
STEM = "reproduction"  # DIR/reproduction.md and DIR/reproduction.json

# A cell's key: (mixer label, family, ladder axis, rung as JSON).
CellKey = tuple[str, str, str | None, str]


def read(root: str | Path, strict: bool = False, quiet: bool = False) -> list[ResultRow]:
    """The records a ranking of ``root`` reads (its tuning runs left out, as ``rank.write`` does);
    ``quiet``: its unreadable files are not named again (a ranking of it just named them)."""
    records = load_records(root, strict=strict, quiet=quiet, exclude=(TUNING_DIR,))
    if not records:
        raise ConfigError(f"no results to compare under {root}")
    return records


def _number(value: Any) -> float | None:
    """A float, or None for a missing value (None or NaN: a median not reached)."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _cells_by_key(cell_rows: pd.DataFrame) -> dict[CellKey, dict[str, Any]]:
    return {(row["mixer"], row["family"], row["axis"], json.dumps(row["rung"])): row
            for row in cell_rows.to_dict("records")}


def _cell_name(key: CellKey) -> str:
    mixer, family, axis, rung = key
    return f"{mixer} {family} {axis or '-'}={json.loads(rung)}"


def _some_cells(keys: Collection[CellKey], shown: int = 3) -> str:
    """``2 cells (lru linear_map task.sparsity=1, ...)``: how many, and the first few by name."""
    names = sorted(_cell_name(k) for k in keys)
    return f"{len(names)} cells ({', '.join(names[:shown])}{', ...' if len(names) > shown else ''})"


def _compared_cell(key: CellKey, first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """One shared cell: each set's emerged, n (trained runs), KM median and budget; Fisher's p (None
    where a set has no trained run)."""
    counts = [(int(c["emerged"]), int(c["seeds"] - c["failed"])) for c in (first, second)]
    (a_success, a_n), (b_success, b_n) = counts
    p = fisher_exact(a_success, a_n, b_success, b_n).p if a_n and b_n else None
    mixer, family, axis, rung = key
    return {"mixer": mixer, "family": family, "axis": axis, "rung": json.loads(rung),
            "rung_index": int(first["rung_index"]),
            "first": _side(first, a_success, a_n), "second": _side(second, b_success, b_n), "p": p}


def _side(cell: dict[str, Any], emerged: int, n: int) -> dict[str, Any]:
    """One set's part of a compared cell: success, the emergence and held-plateau medians (None: not
    reached; the plateau's None too where no run kept a curve), the plateaus worth the name."""
    curves = int(cell.get("runs_with_curves") or 0)
    return {"emerged": emerged, "n": n, "median_emergence_step": _number(cell["median_emergence_step"]),
            "median_plateau_end": _number(cell.get("median_held_plateau_end")) if curves else None,
            "plateaus_worth": int(cell.get("held_plateaus") or 0) if curves else None, "runs_with_curves": curves,
            "budget": _number(cell["budget"])}


def _summary(compared: list[dict[str, Any]]) -> dict[str, Any]:
    tested = [c["p"] for c in compared if c["p"] is not None]
    adjusted = holm([c["p"] for c in compared])
    for cell, holm_p in zip(compared, adjusted):
        cell["holm_p"] = holm_p
    medians = [(c["first"]["median_emergence_step"], c["second"]["median_emergence_step"]) for c in compared]
    shifts = [abs(a - b) for a, b in medians if a is not None and b is not None]
    both_curves = [c for c in compared if c["first"]["runs_with_curves"] and c["second"]["runs_with_curves"]]
    plateaus = [(c["first"]["median_plateau_end"], c["second"]["median_plateau_end"]) for c in both_curves]
    plateau_shifts = [abs(a - b) for a, b in plateaus if a is not None and b is not None]
    return {"cells": len(compared), "tested": len(tested),
            "differing": sum(1 for p in tested if p < ALPHA),
            "expected_by_chance_at_most": len(tested) * ALPHA,
            "differing_holm": sum(1 for p in adjusted if p is not None and p < ALPHA),
            "success_count_changed": sum(1 for c in compared if c["first"]["emerged"] != c["second"]["emerged"]),
            "both_medians": len(shifts),
            "median_abs_median_shift": statistics.median(shifts) if shifts else None,
            "one_median_reached": sum(1 for a, b in medians if (a is None) != (b is None)),
            "plateau_cells": len(both_curves), "both_plateau_medians": len(plateau_shifts),
            "median_abs_plateau_shift": statistics.median(plateau_shifts) if plateau_shifts else None,
            "plateaus_worth": [sum(c[side]["plateaus_worth"] for c in both_curves) for side in ("first", "second")],
            "plateau_runs": [sum(c[side]["runs_with_curves"] for c in both_curves) for side in ("first", "second")]}


def _rankings(first: pd.DataFrame, second: pd.DataFrame) -> list[dict[str, Any]]:
    """Each mixer of either ranking, best of the first first: its rank, score and whether the rank is a
    tie, in each (None where absent)."""
    sides = [{row["mixer"]: (int(row["rank"]), float(row["score"]), not pd.isna(row["tied_with"]))
              for row in table.to_dict("records")} for table in (first, second)]
    order = list(first["mixer"]) + [m for m in second["mixer"] if m not in sides[0]]
    rows = []
    for mixer in order:
        (first_rank, first_score, first_tie), (second_rank, second_score, second_tie) = \
            (side.get(mixer, (None, None, False)) for side in sides)
        rows.append({"mixer": mixer, "first_rank": first_rank, "first_score": first_score, "first_tie": first_tie,
                     "second_rank": second_rank, "second_score": second_score, "second_tie": second_tie})
    return rows


def _areas(first: pd.DataFrame, second: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per (family, mixer) of either set: its area on the family's ladder in each."""
    sides = [{(row["family"], row["mixer"]): float(row["area"]) for row in table.to_dict("records")}
             for table in (first, second)]
    return [{"family": family, "mixer": mixer, "first_area": sides[0].get((family, mixer)),
             "second_area": sides[1].get((family, mixer))}
            for family, mixer in sorted(set(sides[0]) | set(sides[1]))]


def compare(first_records: list[ResultRow], second_records: list[ResultRow],
            axes: dict[str, str] | None = None) -> dict[str, Any]:
    """The two sets compared. Keys: ``cells`` (one per shared cell, ladder order: mixer, family, axis,
    rung, rung_index, ``first``/``second`` = {emerged, n, median_emergence_step, budget}, p, holm_p),
    ``only_first``/``only_second`` (the names of the cells one set lacks), ``summary`` (counts; see
    ``_summary``), ``ranking`` (per mixer: first_rank, first_score, first_tie, and the second's),
    ``disagreements`` ({"first": pairs (a, b) with a above b in the first ranking and below it in the
    second, "second": the reverse}) and ``areas`` (per family and mixer: first_area, second_area).
    Raises ConfigError when either set is empty or the two share no cell."""
    if not first_records or not second_records:
        raise ConfigError("no results to compare: " + ("the first set" if not first_records else "the second set")
                          + " is empty")
    cell_rows = [rank.cells(records, axes) for records in (first_records, second_records)]
    by_key = [_cells_by_key(table) for table, _ in cell_rows]
    shared = sorted(set(by_key[0]) & set(by_key[1]),
                    key=lambda k: (k[1], k[0], int(by_key[0][k]["rung_index"])))
    if not shared:
        raise ConfigError(f"the two result sets share no cell (mixer, family, rung): the first has "
                          f"{_some_cells(by_key[0])}, the second {_some_cells(by_key[1])}; compare two runs of "
                          f"one ladder")
    compared = [_compared_cell(k, by_key[0][k], by_key[1][k]) for k in shared]
    families = [rank.family_scores(table, ladder) for table, ladder in cell_rows]
    rankings = [rank.overall(scores, table) for scores, (table, _) in zip(families, cell_rows)]
    return {"summary": _summary(compared), "cells": compared,
            "only_first": sorted(_cell_name(k) for k in set(by_key[0]) - set(by_key[1])),
            "only_second": sorted(_cell_name(k) for k in set(by_key[1]) - set(by_key[0])),
            "ranking": _rankings(*rankings),
            "disagreements": {"first": [list(pair) for pair in rank.disagreements(*rankings)],
                              "second": [list(pair) for pair in rank.disagreements(rankings[1], rankings[0])]},
            "areas": _areas(*families)}


def _step(median: float | None, budget: float | None) -> str:
    """A KM median in steps; ``>budget`` where it was not reached."""
    if median is not None:
        return f"{median:g}"
    return f">{budget:g}" if budget is not None else "not reached"


def _plateau(side: dict[str, Any]) -> str:
    """``400 (3/8)``: the held plateau's median end and the runs worth the name; ``-`` without curves."""
    if not side.get("runs_with_curves"):
        return "-"
    return f"{_step(side['median_plateau_end'], side['budget'])} ({side['plateaus_worth']}/{side['runs_with_curves']})"


def _optional(value: float | int | None, form: str = "{:.2f}") -> str:
    return "-" if value is None else form.format(value)


def _rank(rank_: int | None, tie: bool) -> str:
    return "-" if rank_ is None else f"{rank_}{' (tie)' if tie else ''}"


def _p(p: float | None) -> str:
    return "-" if p is None else f"{p:.2g}"


def summary_lines(comparison: dict[str, Any], first_name: str, second_name: str) -> list[str]:
    """The summary as sentences (what the command prints last)."""
    s = comparison["summary"]
    shift = "-" if s["median_abs_median_shift"] is None else f"{s['median_abs_median_shift']:g} steps"
    plateau_shift = "-" if s["median_abs_plateau_shift"] is None else f"{s['median_abs_plateau_shift']:g} steps"
    lines = [f"{s['differing']} of {s['tested']} cells differ at p < {ALPHA} (two-sided Fisher exact), at most "
             f"{s['tested']}·{ALPHA} = {s['expected_by_chance_at_most']:.2g} expected by chance; "
             f"{s['differing_holm']} after Holm's adjustment.",
             f"{s['success_count_changed']} of {s['cells']} cells changed their success count. Median emergence "
             f"step: median absolute difference {shift} over the {s['both_medians']} cells where both reached a "
             f"median; cells where only one did: {s['one_median_reached']}.",
             (f"Held plateau, over the {s['plateau_cells']} cells where both sets kept curves: median end's median "
              f"absolute difference {plateau_shift} over the {s['both_plateau_medians']} cells where both reached "
              f"one; plateaus worth the name {s['plateaus_worth'][0]}/{s['plateau_runs'][0]} in {first_name}, "
              f"{s['plateaus_worth'][1]}/{s['plateau_runs'][1]} in {second_name}." if s["plateau_cells"] else
              "Held plateau: no cell where both sets kept train-loss curves (a slim reference has none)."),
             f"Tiers: {len(comparison['disagreements']['first'])} pairs ordered above in {first_name} and below in "
             f"{second_name}, {len(comparison['disagreements']['second'])} the other way."]
    if s["tested"] < s["cells"]:
        lines.append(f"{s['cells'] - s['tested']} shared cells not tested (a set has no trained run there).")
    if comparison["only_first"] or comparison["only_second"]:
        lines.append(f"Not compared: {len(comparison['only_first'])} cells only in {first_name}, "
                     f"{len(comparison['only_second'])} only in {second_name}.")
    return lines


def render(comparison: dict[str, Any], first_name: str, second_name: str) -> str:
    """The comparison as Markdown: summary, differing cells, tiers, areas per family, every shared cell."""
    differing = [c for c in comparison["cells"] if c["p"] is not None and c["p"] < ALPHA]
    cell_table = Table(["family", "rung", "mixer", f"emerged/n {first_name}", f"emerged/n {second_name}",
                        "Fisher p", "Holm p", f"median emergence {first_name}", f"median emergence {second_name}",
                        f"plateau end (worth) {first_name}", f"plateau end (worth) {second_name}"],
                       [[c["family"], f"{c['axis'] or '-'}={c['rung']}", c["mixer"],
                         f"{c['first']['emerged']}/{c['first']['n']}", f"{c['second']['emerged']}/{c['second']['n']}",
                         _p(c["p"]), _p(c["holm_p"]),
                         _step(c["first"]["median_emergence_step"], c["first"]["budget"]),
                         _step(c["second"]["median_emergence_step"], c["second"]["budget"]),
                         _plateau(c["first"]), _plateau(c["second"])]
                        for c in comparison["cells"]])
    rank_table = Table(["mixer", f"rank {first_name}", f"score {first_name}", f"rank {second_name}",
                        f"score {second_name}"],
                       [[r["mixer"], _rank(r["first_rank"], r["first_tie"]), _optional(r["first_score"]),
                         _rank(r["second_rank"], r["second_tie"]), _optional(r["second_score"])]
                        for r in comparison["ranking"]])
    area_table = Table(["family", "mixer", f"area {first_name}", f"area {second_name}"],
                       [[a["family"], a["mixer"], _optional(a["first_area"]), _optional(a["second_area"])]
                        for a in comparison["areas"]])
    pairs = {side: ", ".join(f"{a} > {b}" for a, b in comparison["disagreements"][side]) or "none"
             for side in ("first", "second")}
    parts = [f"## Reproduction: {first_name} against {second_name}", "",
             "Two draws of one ladder (other seeds, or the same seeds in another float order) reproduce a ranking "
             "as a distribution, not bit for bit: a cell differs when Fisher's exact test of its two success counts "
             "gives p < 0.05, which chance alone does in at most 5% of the cells.", "",
             *(f"- {line}" for line in summary_lines(comparison, first_name, second_name)), "",
             "Differing cells (p < 0.05): " + ("; ".join(
                 f"{c['mixer']} {c['family']} {c['axis'] or '-'}={c['rung']} "
                 f"({c['first']['emerged']}/{c['first']['n']} vs {c['second']['emerged']}/{c['second']['n']}, "
                 f"p = {_p(c['p'])})" for c in differing) or "none") + ".",
             "", "## Tiers", "",
             f"Ordered above in {first_name}, below in {second_name}: {pairs['first']}.",
             f"Ordered above in {second_name}, below in {first_name}: {pairs['second']}.", "",
             rank_table.markdown(), "", "## Area per family", "", area_table.markdown(), "",
             "## Cells", "", "`>budget`: the Kaplan–Meier median was not reached within the budget (for the plateau: "
             "still held). Plateau end (worth): the held plateau's median end, with the runs whose plateau is worth "
             "the name of those with a train-loss curve.", "",
             cell_table.markdown()]
    for side, name in (("only_first", first_name), ("only_second", second_name)):
        if comparison[side]:
            parts += ["", f"Only in {name} (not compared): {', '.join(comparison[side])}."]
    return "\n".join(parts) + "\n"


def compared(root: str | Path, other: str | Path, axes: dict[str, str] | None = None, strict: bool = False,
             quiet: bool = False) -> tuple[dict[str, Any], str]:
    """The results under ``root`` compared against those under ``other`` (each read as a ranking reads
    it), and the comparison as Markdown; nothing written (``save`` writes them). ``quiet``: root's
    unreadable files are not named (its ranking names them)."""
    root, other = Path(root), Path(other)
    comparison = compare(read(root, strict, quiet), read(other, strict), axes)
    return comparison, render(comparison, str(root), str(other))


def files(root: str | Path, other: str | Path, comparison: dict[str, Any], markdown: str) -> dict[Path, str]:
    """``compared``'s answer as the files it goes to: root/reproduction.md and root/reproduction.json."""
    root = Path(root)
    return {root / f"{STEM}.md": markdown,
            root / f"{STEM}.json": json_text({"first": str(root), "second": str(Path(other)), **comparison})}


def save(root: str | Path, other: str | Path, comparison: dict[str, Any], markdown: str) -> None:
    """Write ``compared``'s answer (``files``), both files or neither."""
    write_files(files(root, other, comparison, markdown))


def write(root: str | Path, other: str | Path, axes: dict[str, str] | None = None, strict: bool = False,
          quiet: bool = False) -> tuple[dict[str, Any], str]:
    """Compare the results under ``root`` against those under ``other`` (``compared``) and write
    root/reproduction.md and root/reproduction.json (``save``). ``quiet``: root's unreadable files are
    not named again (its ranking just named them)."""
    comparison, markdown = compared(root, other, axes, strict, quiet)
    save(root, other, comparison, markdown)
    return comparison, markdown
