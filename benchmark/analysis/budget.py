"""Where a sweep's time went, summed from its rows' own clocks: per stage (its tuning, its ranking),
group and mixer, the worker time its training took and how much of it went to seeds that never
emerged.

A seed-parallel group (``seed_parallel.group``: K seeds stacked in one process) is one piece of
work: its worker time is its longest seed's train + eval seconds (every seed's clock starts
together; a seed that ended early stops its own). A run trained alone is a piece of its own. Of
each piece's time, the **censored tail** is what it trained after its last seed to emerge ended:
time spent only on seeds that did not emerge (they went the whole budget, or a tuning point was
pruned). A sweep whose time is mostly tail is paying for its budget, not for emergence.

On W workers the stage's wall time is at least its worker time over W (perfect packing; the
sweep's own log gives the real clock, with process starts and the last groups' idle workers).
The process start and the model's build are not in the rows' clocks: a few seconds a group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emergence_bench.results.row import ResultRow, Row, emergence_step, section
from emergence_bench.results.store import TUNING_DIR, load_groups

TABLE_FILE = "budget.md"


@dataclass(frozen=True)
class Piece:
    """One seed-parallel group's (or one lone run's) rows and clock."""

    rows: tuple[Row, ...]

    @staticmethod
    def seconds_of(row: Row) -> float:
        timing = section(row, "timing")
        return float(timing.get("train_seconds") or 0.0) + float(timing.get("eval_seconds") or 0.0)

    @property
    def seconds(self) -> float:
        """Its worker time: the longest seed's train + eval seconds."""
        return max(self.seconds_of(r) for r in self.rows)

    @property
    def emerged(self) -> int:
        return sum(emergence_step(r) is not None for r in self.rows)

    @property
    def tail_seconds(self) -> float:
        """Seconds trained after its last emerged seed ended (all of it when none emerged)."""
        ended = [self.seconds_of(r) for r in self.rows if emergence_step(r) is not None]
        return self.seconds - max(ended, default=0.0)


def pieces(rows: Sequence[Row]) -> list[Piece]:
    """``rows`` [N] -> the seed-parallel groups they trained in (a row alone where it had none); a
    group's rows that are not among ``rows`` (still training) are simply absent."""
    by_group: dict[tuple[str, ...], list[Row]] = {}
    for row in rows:
        members = section(row, "seed_parallel").get("group") or [row["run_id"]]
        by_group.setdefault(tuple(sorted(members)), []).append(row)
    return [Piece(tuple(members)) for members in by_group.values()]


def stages(root: str | Path) -> dict[str, dict[str, list[ResultRow]]]:
    """A sweep's ``--out``: {"tuning": its tuning rows by group, "ranking": the rest by group}; a
    folder with only one of them gives only that one (a tuning folder given itself reads as
    "ranking", its groups being what it holds)."""
    root = Path(root)
    found: dict[str, dict[str, list[ResultRow]]] = {}
    if (root / TUNING_DIR).is_dir():
        try:
            found["tuning"] = load_groups(root / TUNING_DIR)
        except ValueError:  # a tuning folder that holds no row yet
            pass
    try:
        found["ranking"] = load_groups(root)
    except ValueError:
        if not found:
            raise
    return found


def _mixer(row: Row) -> str:
    return str(row["config"].get("mixer", {}).get("name", "?"))


def budget(root: str | Path, workers: int = 2) -> dict[str, Any]:
    """The budget table of the results folder ``root``: ``lines``, one per stage, group and mixer
    {stage, group, mixer, groups, runs, emerged, pruned, seconds, tail_seconds, steps_per_second (the
    median over its pieces of the longest seed's)}, and ``stages``: per stage its total seconds, tail
    seconds and the wall time it needs at least on ``workers`` workers."""
    if workers < 1:
        raise ValueError(f"workers must be ≥ 1, got {workers}")
    lines: list[dict[str, Any]] = []
    totals: dict[str, dict[str, float]] = {}
    for stage, groups in stages(root).items():
        for group, rows in groups.items():
            by_mixer: dict[str, list[Row]] = {}
            for row in rows:
                by_mixer.setdefault(_mixer(row), []).append(row)
            for mixer, members in sorted(by_mixer.items()):
                found = pieces(members)
                speeds = sorted(float(section(max(p.rows, key=Piece.seconds_of), "timing")
                                      .get("steps_per_second") or 0.0) for p in found)
                lines.append({"stage": stage, "group": group, "mixer": mixer, "groups": len(found),
                              "runs": len(members), "emerged": sum(p.emerged for p in found),
                              "pruned": sum(bool(r.get("pruned")) for r in members),
                              "seconds": sum(p.seconds for p in found),
                              "tail_seconds": sum(p.tail_seconds for p in found),
                              "steps_per_second": speeds[len(speeds) // 2] if speeds else None})
        stage_lines = [line for line in lines if line["stage"] == stage]
        seconds = sum(line["seconds"] for line in stage_lines)
        totals[stage] = {"seconds": seconds, "tail_seconds": sum(line["tail_seconds"] for line in stage_lines),
                         "runs": sum(line["runs"] for line in stage_lines), "wall_seconds_at_least": seconds / workers}
    return {"workers": workers, "lines": lines, "stages": totals}


def clock(seconds: float) -> str:
    """Seconds as h:mm (rounded to the minute)."""
    minutes = round(seconds / 60)
    return f"{minutes // 60}:{minutes % 60:02d}"


def to_markdown(table: dict[str, Any]) -> str:
    """The budget as Markdown: one line per stage, group and mixer, then each stage's totals."""
    lines = ["| stage | group | mixer | seed-parallel groups | runs | emerged | pruned | worker time (h:mm) | "
             "of it, the censored tail | steps/s (median) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for line in table["lines"]:
        tail = line["tail_seconds"] / line["seconds"] if line["seconds"] else 0.0
        speed = "-" if line["steps_per_second"] is None else f"{line['steps_per_second']:.1f}"
        lines.append(f"| {line['stage']} | {line['group']} | {line['mixer']} | {line['groups']} | {line['runs']} | "
                     f"{line['emerged']} | {line['pruned']} | {clock(line['seconds'])} | {tail:.0%} | {speed} |")
    lines.append("")
    for stage, total in table["stages"].items():
        tail = total["tail_seconds"] / total["seconds"] if total["seconds"] else 0.0
        lines.append(f"- {stage}: {total['runs']} runs, {clock(total['seconds'])} of worker time ({tail:.0%} of it "
                     f"the censored tail): at least {clock(total['wall_seconds_at_least'])} of wall time on "
                     f"{table['workers']} worker(s)")
    return "\n".join(lines) + "\n"
