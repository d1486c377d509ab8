"""The claims scorecard of a results folder (``emergence-bench claims DIR``): every declared claim
(``emergence_bench.claims.claim``) judged on the folder's rows, grouped by sweep group, and written
beside them as ``claims.md``, ``claims.csv`` and ``claims.json``.

Before judging, the runs of the ``patching`` group that emerged between two checkpoints are patched
(``analyze patch``: the top 1…16 heads of the post-emergence checkpoint into the pre-emergence one,
and the ground-truth pattern), once: the reports are kept in each run's ``analysis/`` folder and read
back on the next call.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pandas as pd

from emergence_bench.claims import claims
from emergence_bench.claims.claim import Claim, ScoreRow, confirmation, scorecard
from emergence_bench.config import ConfigError
from emergence_bench.results.atomic import write_files
from emergence_bench.results.row import ResultRow, emergence_step
from emergence_bench.results.store import (
    ANALYSIS_DIR,
    UnreadableResult,
    json_text,
    parse_result,
    result_paths,
    without_non_finite,
)

PATCHING_GROUP = "patching"
TOP_K = 16


def rows_by_group(folder: Path, quiet: bool = False) -> dict[str, list[ResultRow]]:
    """The folder's readable rows by sweep group (the first folder under ``folder``; rows directly in
    it belong to the group ``""``); ``quiet``: an unreadable row is not named (again)."""
    groups: dict[str, list[ResultRow]] = defaultdict(list)
    for path in result_paths(folder):
        parts = path.relative_to(folder).parts
        try:
            groups[parts[0] if len(parts) > 2 else ""].append(parse_result(path))
        except UnreadableResult as error:
            if not quiet:
                print(f"warning: {error}; left out of the scorecard", file=sys.stderr)
    return dict(groups)


def attach_patching(folder: Path, rows: list[ResultRow], compute: bool = True) -> int:
    """Adds a ``patching`` section to each row of the patching group whose emergence two checkpoints
    bracket, patching it first where its reports are not yet on disk (unless not ``compute``: then
    such a row stays unpatched); returns how many were patched now."""
    from emergence_bench.analysis.analyze import load_run, patch
    from emergence_bench.claims.patching import FEW_HEADS, bracket

    patched = 0
    for row in confirmation(rows, FEW_HEADS.settings):  # exploration runs never count: not patched
        if emergence_step(row) is None:
            continue
        run_dir = folder / PATCHING_GROUP / row["run_id"]
        try:
            _, _, checkpoints = load_run(run_dir)
        except ValueError:  # no checkpoints (it failed early) or no config: nothing to patch
            continue
        steps = bracket(row, sorted(checkpoints))
        if steps is None:
            continue
        old, new = steps
        reports = {}
        for truth in (False, True):
            path = run_dir / ANALYSIS_DIR / (f"patch_{old}_{new}" + ("_ground_truth" if truth else "") + ".json")
            if path.is_file():
                reports[truth] = json.loads(path.read_text(encoding="utf-8"))
            elif compute:
                reports[truth] = patch(run_dir, old, new, top_k=TOP_K, ground_truth=truth, device="cpu")
                patched += 1
        if len(reports) < 2:
            continue
        truth_best = max((t["fraction_recovered"] for t in reports[True]["top_k"] if t["fraction_recovered"] is not None),
                         default=None)
        cast(dict[str, Any], row)["patching"] = {"old": old, "new": new, "top_k": reports[False]["top_k"],
                                                 "ground_truth": truth_best}
    return patched


def number(value: float | None, spec: str = ".3g") -> str:
    """``0.25``; ``∞`` for an unbounded end (a median never reached); ``-`` for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if math.isinf(value):
        return "∞" if value > 0 else "−∞"
    return f"{value:{spec}}"


def effect_cell(row: dict[str, Any]) -> str:
    if row["effect"] is None and row["low"] is None:
        return "-"
    interval = f" [{number(row['low'])}, {number(row['high'])}]" if row["low"] is not None or row["high"] is not None else ""
    return number(row["effect"]) + interval


def table(card: Sequence[ScoreRow]) -> list[dict[str, Any]]:
    return [row.to_dict() for row in card]


def to_markdown(rows: list[dict[str, Any]], full: bool = True) -> str:
    """The scorecard as a Markdown table: ``full`` with the paper's words, what the effect measures,
    the test and the details (claims.md); else one short line per row (the terminal)."""
    if full:
        lines = ["| claim | paper | effect [95%] | test | p (Holm) | n | verdict | why |", "|---|---|---|---|---|---|---|---|"]
    else:
        lines = ["| claim | effect [95%] | p (Holm) | n | verdict | why |", "|---|---|---|---|---|---|"]
    for r in rows:
        paper = r["paper"] + ("" if r["paper_number"] == "-" else f" ({r['paper_number']})")
        why = r["reason"] + (f"; {r['details']}" if r["details"] and full else "")
        if full:
            lines.append(f"| {r['number']}. {r['claim']} | {paper} | {effect_cell(r)} ({r['effect_measures']}; "
                         f"predicted {r['predicts']}) | {r['statistic']} | {number(r['p_holm'], '.2g')} | "
                         f"{r['n'] or '-'} | **{r['verdict']}** | {why} |")
        else:
            lines.append(f"| {r['number']}. {r['claim']} | {effect_cell(r)} | {number(r['p_holm'], '.2g')} | "
                         f"{r['n'] or '-'} | **{r['verdict']}** | {why} |")
    counts = pd.Series([r["verdict"] for r in rows]).value_counts()
    summary = ", ".join(f"{counts.get(v, 0)} {v}" for v in ("agrees", "disagrees", "inconclusive", "n/a", "not run"))
    return "\n".join(lines) + f"\n\n{len(rows)} rows: {summary}.\n"


def judge(folder: Path, only: Sequence[Claim] | None = None, patch: bool = True) -> list[ScoreRow]:
    """Every declared claim judged on ``folder``'s rows (Holm over all of them, as pre-registered),
    then only the rows of ``only`` kept; the patching group's runs patched first (with ``patch``; else
    only those patched before count)."""
    groups = rows_by_group(folder)
    if not any(groups.values()):
        raise ValueError(f"no readable results under {folder}: run `emergence-bench sweep claims-cpu-v2 --out {folder}` first")
    if groups.get(PATCHING_GROUP):
        attach_patching(folder, groups[PATCHING_GROUP], compute=patch)
    card = scorecard(groups, claims())
    return card if only is None else [row for row in card if row.claim in only]


def write(folder: Path, only: Sequence[Claim] | None = None) -> tuple[list[dict[str, Any]], str]:
    """Judges the claims on ``folder``'s rows and writes claims.{md,csv,json} there (the whole
    scorecard; ``only`` chooses the rows returned). A folder where no claim finds its rows (every
    verdict "not run": not a claims sweep) is a ConfigError, and nothing is written."""
    card = judge(folder)
    if all(row.verdict == "not run" for row in card):
        found = [repr(g) if g else "none (runs directly in it)" for g in sorted(rows_by_group(folder, quiet=True))]
        read = sorted({group for row in card for group in row.claim.groups})
        raise ConfigError(f"no claims rows under {folder}: no claim finds its confirmation runs there (its runs' "
                          f"group(s): {', '.join(found)}; the claims read group(s) {', '.join(read)}); "
                          f"run `emergence-bench sweep claims-cpu-v2 --out {folder}` first")
    written = table(card)
    rows = [r.to_dict() for r in card if only is None or r.claim in only]
    flat = pd.DataFrame([{k: v for k, v in r.items() if k != "settings"} for r in written])
    write_files({folder / "claims.md": to_markdown(written), folder / "claims.csv": flat.to_csv(index=False),
                 folder / "claims.json": json_text(without_non_finite(written)[0])})  # an unbounded end as null
    return rows, to_markdown(rows, full=False)

