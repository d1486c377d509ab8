"""The claims scorecard rendered (``emergence-bench claims DIR``): the verdicts ``claims.judge``
gave a results folder, as a Markdown table (the terminal's, and claims.md) and written beside the rows
as ``claims.md``, ``claims.csv`` and ``claims.json``. It judges nothing itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from emergence_bench.claims.claim import Claim
from emergence_bench.claims.judge import ScoreRow
from emergence_bench.results.atomic import write_files
from emergence_bench.results.store import json_text, without_non_finite


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
    bounded = row["low"] is not None or row["high"] is not None
    interval = f" [{number(row['low'])}, {number(row['high'])}]" if bounded else ""
    return number(row["effect"]) + interval


def table(card: Sequence[ScoreRow]) -> list[dict[str, Any]]:
    return [row.to_dict() for row in card]


def to_markdown(rows: list[dict[str, Any]], full: bool = True) -> str:
    """The scorecard as a Markdown table: ``full`` with the paper's words, what the effect measures,
    the test and the details (claims.md); else one short line per row (the terminal)."""
    if full:
        lines = ["| claim | paper | effect [95%] | test | p (Holm) | n | verdict | why |",
                 "|---|---|---|---|---|---|---|---|"]
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


def write(folder: Path, card: Sequence[ScoreRow], only: Sequence[Claim] | None = None,
          note: str = "") -> tuple[list[dict[str, Any]], str]:
    """Writes the judged ``card`` (``claims.judge.judge_folder``) as claims.{md,csv,json} in ``folder``
    (the whole scorecard; ``only`` chooses the rows returned; ``note``, a line below claims.md's table:
    which rows a reference gave); returns those rows and their short table."""
    written = table(card)
    rows = [r.to_dict() for r in card if only is None or r.claim in only]
    flat = pd.DataFrame([{k: v for k, v in r.items() if k != "settings"} for r in written])
    markdown = to_markdown(written) + (f"\n{note}\n" if note else "")
    write_files({folder / "claims.md": markdown, folder / "claims.csv": flat.to_csv(index=False),
                 folder / "claims.json": json_text(without_non_finite(written)[0])})  # an unbounded end as null
    return rows, to_markdown(rows, full=False)
