"""`emergence-bench report DIR`: one self-contained HTML file of a finished (or running) sweep.

The page (``reporting/page.py``) holds the leaderboard, then every registered figure that the results
allow, in order (``reporting/figures/``: the loss curves, the staircase, the emergence step per seed,
the ranking with its tuning curves, survival, forest and state figures, plateau and emergence against
each numeric sweep axis, threshold sensitivity, a heatmap of the final eval loss over two axes, and
attention maps), each with a line on how to read it, and the provenance of the numbers. Every figure
is a PNG embedded in the page, so the file can be mailed or archived alone, and is also written as
PNG and SVG files. This module assembles the page.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from emergence_bench.reporting import leaderboard
from emergence_bench.reporting.figure import REGISTRY, Results, show
from emergence_bench.reporting.figures import FIGURES
from emergence_bench.reporting.page import Page
from emergence_bench.reporting.rows_to_rank import rows_to_rank
from emergence_bench.reporting.table import Table
from emergence_bench.results.atomic import write_files
from emergence_bench.results.row import ResultRow, section
from emergence_bench.results.store import (
    REPORT_FILE,
    RESULT_FILE,
    TUNING_DIR,
    code_version,
    load_records,
    mixed_code_note,
)


def _groups(records: list[ResultRow], table: pd.DataFrame, over: tuple[str, ...]) -> list[tuple[str, list[ResultRow]]]:
    """(row label, member records) per leaderboard row, in the table's order."""
    labels: dict[str, list[ResultRow]] = {}
    for record in records:
        key = leaderboard.group_key(record, over)
        labels.setdefault(key, []).append(record)
    rows = []
    for row in table.to_dict("records"):
        rows.append((leaderboard.row_label(row), labels[row["_key"]]))
    return rows


def write(root: str | Path, out: str | Path | None = None, axes: tuple[str, str] | None = None,
          maps: int = 4, over: tuple[str, ...] = ("seed",), strict: bool = False,
          figures: tuple[str, ...] | None = None, seed: int | None = None, reference: str | None = None) -> Path:
    """Write the report for every result under ``root``; returns the HTML file's path. Its figures
    also go to ``<report stem>_figures/`` beside it as PNG and SVG. ``figures``: those of FIGURES
    to draw (default: every one the results allow). ``seed``: the seed the staircase and filmstrip
    show (default: each group's median-emergence seed). ``reference``: the shipped results the ranking
    figures rank the mixers ``root`` lacks against (``builtin`` or a file; default: the one
    DIR/rank.json was ranked against, if any). ``strict``: an unreadable result file is an
    error, not a warning (see results.load_records)."""
    chosen = FIGURES if figures is None else tuple(figures)
    unknown = [f for f in chosen if f not in FIGURES]
    if unknown:
        raise ValueError(f"--figures: no figure named {', '.join(unknown)}; figures: {', '.join(FIGURES)}")
    root = Path(root)
    out = Path(out) if out else root / REPORT_FILE
    records = load_records(root, strict=strict, exclude=(TUNING_DIR,))  # the tuning runs: their own figure
    if not records:
        raise ValueError(f"no {RESULT_FILE} under {root}")
    if maps < 0:
        raise ValueError(f"--maps must be ≥ 0 (0: no attention maps), got {maps}")
    seeds = sorted({r["seed"] for r in records})
    if seed is not None and seed not in seeds:
        raise ValueError(f"--seed {seed}: no run of that seed under {root}; seeds: {', '.join(map(str, seeds))}")
    leaderboard.check_over(records, over)
    table = leaderboard.build(records, over, keep_keys=True)
    if reference is not None:  # an unknown name, a bad file or another ladder: refused before anything is drawn
        rows_to_rank(records, root, reference)
    results = Results(records, _groups(records, table, over), root, axes, maps, seed, reference)
    page = Page(out.with_name(f"{out.stem}_figures"))
    page.add(f"<p>{len(records)} runs in {len(table)} groups.</p>")
    page.section("Leaderboard")
    shown, empty = leaderboard.human_table(table.drop(columns="_key")).without_empty_columns()
    page.add(shown.html() + (f"<p>Not shown: {html.escape(', '.join(empty))}, \"-\" in every row "
                             "(leaderboard.md has every column).</p>" if empty else ""))
    note = mixed_code_note(records)
    if note:
        page.add(f"<p><b>Note:</b> {html.escape(note)} (see Provenance below).</p>")
    for name in FIGURES:
        if name in chosen:
            show(page, REGISTRY[name], results)
    page.section("Provenance", "Where these numbers come from: the code, the software, the machines and the "
                 "commands, with the number of runs for each.")
    page.add(provenance_table(records).html())
    write_files({**page.files, out: page.html(f"emergence-bench report: {root}")})  # all at once, at the end
    return out


def provenance_table(records: list[ResultRow]) -> Table:
    """What the runs were computed with: commits (dirty or not), versions, devices, machines, thread
    and allocator policies, commands; each value with its number of runs."""
    def counted(values: Iterable[object]) -> str:
        counts = Counter(values)
        return "\n".join(f"{v} ({n} run{'s' if n > 1 else ''})" for v, n in counts.most_common(8)) \
            + (f"\n… and {len(counts) - 8} more" if len(counts) > 8 else "")

    def provenance(r: ResultRow, *keys: str) -> object:
        value: object = section(r, "provenance")
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return "not recorded" if value is None else value

    def versions(r: ResultRow) -> str:
        return ", ".join(f"{k} {v}" for k, v in (r.get("versions") or {}).items() if v) or "not recorded"

    def machine(r: ResultRow) -> str:
        return (f"{provenance(r, 'machine', 'host')} ({provenance(r, 'machine', 'platform')}, "
                f"{provenance(r, 'machine', 'cpus')} CPUs)" if r.get("provenance") else "not recorded")

    def threads(r: ResultRow) -> str:
        return (f"{provenance(r, 'threads', 'setting')} → {provenance(r, 'threads', 'used')} thread(s)"
                if r.get("provenance") else "not recorded")

    return Table([], [["code (git commit)", counted(code_version(r) for r in records)],
                      ["versions", counted(versions(r) for r in records)],
                      ["device", counted(r.get("device") or "not recorded" for r in records)],
                      ["machine", counted(machine(r) for r in records)],
                      ["threads (setting → used)", counted(threads(r) for r in records)],
                      ["allocator", counted(provenance(r, "allocator") for r in records)],
                      ["command", counted(provenance(r, "command") for r in records)]], row_headers=True)

