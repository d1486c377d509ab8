"""The claims judged: every claim's verdict on result rows, and on a results folder.

``judge(rows, claims)`` judges claims on result rows by sweep group:

- ``p`` is Holm-adjusted over every claim row of the same stage that has a p (the first stage's
  confirmation is one family, a replication on fresh seeds another, judged alone at its own alpha);
- a ``difference`` claim ``agrees`` when the adjusted p < 0.05 and the effect goes the paper's way,
  ``disagrees`` when it is significant the other way, and is ``inconclusive`` otherwise, with the
  smallest effect this many seeds could have detected;
- an ``equivalence`` claim (two things coincide) agrees when its p (two one-sided tests against
  the margin) is below 0.05 after adjustment, disagrees when the effect's interval lies outside the
  margin, and is inconclusive otherwise;
- a ``fit`` (a model of the data: "each head finds the pattern independently") disagrees when its
  goodness-of-fit test rejects it, and is otherwise inconclusive (consistent with the data, which is
  not evidence for it).

``judge_folder(folder)`` reads a folder's rows by sweep group (the patching group's reports read from
each run's ``analysis/`` folder) and judges every declared claim on them, leaving out a stage none of
whose rows it holds (a replication's folder is not the first stage's); given a reference's rows of
one stage (``claims.reference``), they fill every (group, mixer) the folder lacks for that stage
(``filled``), never another stage's. The reporting layer only renders the result
(``reporting/scorecard.py``).
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from emergence_bench.claims import claims
from emergence_bench.claims.claim import Claim, Evidence, NotApplicable, Outcome, Rows, config_value, confirmation
from emergence_bench.config import ConfigError
from emergence_bench.results.row import ResultRow, Row, emergence_step
from emergence_bench.results.store import ANALYSIS_DIR, TUNING_DIR, UnreadableResult, parse_result, result_paths
from emergence_bench.stats.significance import holm

ALPHA = 0.05
Verdict = Literal["agrees", "disagrees", "inconclusive", "n/a", "not run"]
PATCHING_GROUP = "patching"


@dataclass(frozen=True)
class ScoreRow:
    """One line of the scorecard: a claim (and the arm it compares, ``label``) with its verdict."""

    claim: Claim
    label: str
    outcome: Outcome | None  # None: its groups have no rows (not run)
    p_adjusted: float | None
    verdict: Verdict
    reason: str

    def to_dict(self) -> dict[str, Any]:
        e = self.outcome if isinstance(self.outcome, Evidence) else None
        return {"claim": self.claim.id + (f"[{self.label}]" if self.label else ""), "number": self.claim.number,
                "stage": self.claim.stage,
                "paper": self.claim.paper, "paper_number": self.claim.paper_number,
                "groups": list(self.claim.groups), "statistic": self.claim.statistic,
                "effect_measures": self.claim.effect,
                "predicts": self.claim.predicts, "effect": e.effect if e else None, "low": e.low if e else None,
                "high": e.high if e else None, "p": e.p if e else None, "p_holm": self.p_adjusted,
                "n": e.n if e else None, "detectable": e.detectable if e else None,
                "details": e.details if e else "", "verdict": self.verdict, "reason": self.reason,
                "settings": dict(self.claim.settings)}


def design_runs(claim: Claim) -> int:
    """The runs a cell of the claim's design holds: its seeds × its task instances."""
    return len(claim.settings["seeds"]) * len(claim.settings.get("task_seeds") or (None,))


def complete(claim: Claim, evidence: Evidence) -> bool:
    """Whether every arm the evidence compared holds the design's runs (an unfinished group, or a
    run that failed, does not: it never gets a verdict)."""
    return evidence.smallest_arm is None or evidence.smallest_arm >= design_runs(claim)


def _verdict(claim: Claim, evidence: Evidence, p: float | None) -> tuple[Verdict, str]:
    if not complete(claim, evidence):
        return "inconclusive", f"an arm has {evidence.smallest_arm} of the design's {design_runs(claim)} runs"
    return verdict(claim, evidence, p)


def verdict(claim: Claim, evidence: Evidence, p: float | None) -> tuple[Verdict, str]:
    """The verdict of a comparison with all the runs its design asks for, and why, at its Holm-adjusted
    ``p`` (None: no test), by the claim's kind (the module docstring)."""
    if p is None:
        return "inconclusive", "no test could be computed"
    significant = p < ALPHA
    if claim.kind == "fit":
        return ("disagrees", "the fit is rejected") if significant else \
            ("inconclusive", "the fit is not rejected (consistent with it, not evidence for it)")
    if claim.kind == "equivalence":
        margin = claim.margin or 0.0
        outside = evidence.low is not None and evidence.high is not None and \
            (evidence.low > margin or evidence.high < -margin)
        if significant:
            return "agrees", f"within ±{margin:g}"
        if outside:
            return "disagrees", f"the interval lies outside ±{margin:g}"
        return "inconclusive", f"the interval reaches past ±{margin:g}"
    if significant and evidence.direction > 0:
        return "agrees", "significant, the paper's way"
    if significant and evidence.direction < 0:
        return "disagrees", "significant, the other way"
    detectable = f"; these seeds detect {evidence.detectable}" if evidence.detectable else ""
    return "inconclusive", ("significant, but mixed in direction" if significant else "not significant") + detectable


def judged_per_mixer(claim: Claim, rows: Rows) -> dict[str, Outcome]:
    """The claim's outcomes on ``rows``; where the rows hold several mixers and the claim does not
    compare mixers, each mixer's rows judged alone, labelled by its name."""
    names = sorted({config_value(r, "mixer.name") for group in rows.values() for r in group})
    if claim.across_mixers or len(names) < 2:
        return dict(claim.evaluate(rows, claim.settings))
    outcomes: dict[str, Outcome] = {}
    for name in names:
        own = {g: [r for r in group if config_value(r, "mixer.name") == name] for g, group in rows.items()}
        lacking = [g for g, group in own.items() if not group]
        if lacking:
            outcomes[name] = NotApplicable(f"no {name} rows in group(s) {', '.join(lacking)}")
            continue
        for label, found in claim.evaluate(own, claim.settings).items():
            outcomes[name + (f", {label}" if label else "")] = found
    return outcomes


def judge(rows: Rows, judged: Sequence[Claim]) -> list[ScoreRow]:
    """The ``judged`` claims (``emergence_bench.claims.claims()``: every declared one) on ``rows``
    (sweep group -> result rows; each claim keeps its confirmation seeds), p Holm-adjusted over the
    rows of each stage that have one."""
    pending: list[tuple[Claim, str, Outcome | None, str]] = []
    for claim in judged:
        missing = [g for g in claim.groups if not confirmation(rows.get(g, ()), claim.settings)]
        if missing:
            pending.append((claim, "", None, f"no confirmation rows in group(s) {', '.join(missing)}"))
            continue
        picked = {g: confirmation(rows[g], claim.settings) for g in claim.groups}
        for label, found in judged_per_mixer(claim, picked).items():
            pending.append((claim, label, found, found.reason if isinstance(found, NotApplicable) else ""))
    # A Holm family per stage: every row of it that gets a verdict (an unfinished arm gets none, so it
    # does not count); a replication is a new test at its own alpha, never the first stage's.
    adjusted: list[float | None] = [None] * len(pending)
    for stage in {claim.stage for claim, _, _, _ in pending}:
        members = [i for i, (claim, _, _, _) in enumerate(pending) if claim.stage == stage]
        tested = [o.p if isinstance(o, Evidence) and complete(claim, o) else None
                  for claim, _, o, _ in (pending[i] for i in members)]
        for i, p in zip(members, holm(tested)):
            adjusted[i] = p
    card = []
    for (claim, label, outcome, reason), p in zip(pending, adjusted):
        if outcome is None:
            card.append(ScoreRow(claim, label, None, None, "not run", reason))
        elif isinstance(outcome, NotApplicable):
            card.append(ScoreRow(claim, label, outcome, None, "n/a", reason))
        else:
            verdict, why = _verdict(claim, outcome, p)
            card.append(ScoreRow(claim, label, outcome, p, verdict, why))
    return card


# A results folder.

def rows_by_group(folder: Path, quiet: bool = False) -> dict[str, list[ResultRow]]:
    """The folder's readable rows by sweep group (the first folder under ``folder``; rows directly in
    it belong to the group ``""``), but a tuned preset's tuning runs (``DIR/tuning``: exploration seeds,
    never a claim's); ``quiet``: an unreadable row is not named (again)."""
    groups: dict[str, list[ResultRow]] = defaultdict(list)
    for path in result_paths(folder, exclude=(TUNING_DIR,)):
        parts = path.relative_to(folder).parts
        try:
            groups[parts[0] if len(parts) > 2 else ""].append(parse_result(path))
        except UnreadableResult as error:
            if not quiet:
                print(f"warning: {error}; left out of the scorecard", file=sys.stderr)
    return dict(groups)


def patch_reports(run_dir: Path, step: int) -> tuple[int, int, dict[str, Any], dict[str, Any]] | None:
    """The patching reports (``analyze patch``: heads, then the ground truth) of the tightest pair of
    checkpoints on disk that brackets ``step`` (old < step <= new), as (old, new, heads, truth); None
    where there is none. Read only: the explicit step, ``emergence-bench claims DIR --patch``, writes
    them for the adjacent pair."""
    pairs = []
    for path in (run_dir / ANALYSIS_DIR).glob("patch_*_*_ground_truth.json"):
        found = re.fullmatch(r"patch_(\d+)_(\d+)_ground_truth\.json", path.name)
        if not found:
            continue
        old, new = int(found[1]), int(found[2])
        if old < step <= new and path.with_name(f"patch_{old}_{new}.json").is_file():
            pairs.append((old, new))
    if not pairs:
        return None
    old, new = max(pairs, key=lambda p: (p[0], -p[1]))  # the adjacent checkpoints, where patched
    read = [json.loads((run_dir / ANALYSIS_DIR / f"patch_{old}_{new}{end}.json").read_text(encoding="utf-8"))
            for end in ("", "_ground_truth")]
    return old, new, read[0], read[1]


def patching_runs(rows: Sequence[ResultRow]) -> list[ResultRow]:
    """The patching group's rows that a declared claim reads as its confirmation (the first stage's
    seeds, a replication's): exploration runs never count, so they are never patched."""
    readers = [claim for claim in claims() if PATCHING_GROUP in claim.groups]
    return [row for row in rows if any(confirmation([row], claim.settings) for claim in readers)]


def attach_patching(folder: Path, rows: list[ResultRow]) -> None:
    """Adds a ``patching`` section to each confirmation row of the patching group whose reports are on
    disk (``patch_reports``); it never patches (torch): a run not patched yet reads as such."""
    for row in patching_runs(rows):
        step = emergence_step(row)
        found = patch_reports(folder / PATCHING_GROUP / row["run_id"], step) if step is not None else None
        if found is None:
            continue
        old, new, heads, truth = found
        truth_best = max((t["fraction_recovered"] for t in truth["top_k"] if t["fraction_recovered"] is not None),
                         default=None)
        cast(dict[str, Any], row)["patching"] = {"old": old, "new": new, "top_k": heads["top_k"],
                                                 "ground_truth": truth_best}


def stage_rows(rows: Sequence[Row], stage: str) -> list[Row]:
    """The rows some claim of ``stage`` reads as its confirmation (its seeds and task instances)."""
    readers = [claim for claim in claims() if claim.stage == stage]
    return [row for row in rows if any(confirmation([row], claim.settings) for claim in readers)]


def filled(own: Rows, shipped: Rows, stage: str) -> tuple[dict[str, list[Row]], dict[str, list[str]]]:
    """``own``'s rows, with ``shipped``'s rows (a reference of ``stage``) filling each (group, mixer)
    that ``own`` lacks among the stage's runs; returns them and what was taken: group -> its mixers.
    A (group, mixer) ``own`` holds even one run of is its own, never topped up (a plugin's folder
    holds its mixer's runs only, so the reference's Transformer rows of the same groups join them);
    ``own``'s runs of another stage (a replication's seeds) take nothing's place."""
    def mixer(row: Row) -> str:
        return str(config_value(row, "mixer.name"))

    rows = {group: list(found) for group, found in own.items()}
    taken: dict[str, list[str]] = {}
    for group, theirs in shipped.items():
        ours = {mixer(row) for row in stage_rows(own.get(group, []), stage)}
        missing = sorted({mixer(row) for row in theirs} - ours)
        if missing:
            rows.setdefault(group, []).extend(row for row in theirs if mixer(row) in missing)
            taken[group] = missing
    return rows, taken


def judge_groups(groups: Rows, shipped: Rows | None = None, stage: str = "") -> list[ScoreRow]:
    """Every declared claim judged on ``groups`` (``judge``), the claims of ``stage`` on them filled
    with ``shipped`` (``filled``); the other stages' on ``groups`` alone, so a reference of the first
    stage never fills a replication's rows. Holm stays per stage, so judging the stages apart is
    judging them together."""
    if not shipped:
        return judge(groups, claims())
    rows = filled(groups, shipped, stage)[0]
    return [line for each in dict.fromkeys(claim.stage for claim in claims())
            for line in judge(rows if each == stage else groups, [c for c in claims() if c.stage == each])]


def read_folder(folder: Path, shipped: Rows | None = None) -> dict[str, list[ResultRow]]:
    """``folder``'s rows by sweep group, the patching group's with the reports already on disk
    (``attach_patching``). A folder without rows is a ValueError, unless ``shipped`` rows judge in
    its place."""
    groups = rows_by_group(folder)
    if not any(groups.values()) and not shipped:
        raise ValueError(f"no readable results under {folder}: "
                         f"run `emergence-bench sweep claims-cpu-v2 --out {folder}` first")
    if groups.get(PATCHING_GROUP):
        attach_patching(folder, groups[PATCHING_GROUP])
    return groups


def judge_read(folder: Path, groups: Rows, only: Sequence[Claim] | None = None, shipped: Rows | None = None,
               stage: str = "") -> list[ScoreRow]:
    """``judge_groups`` on ``folder``'s rows (``read_folder``), each stage kept only where some row of it
    was judged; then only the rows of ``only``. A folder where no claim finds its rows (every verdict
    "not run": not a claims sweep) is a ConfigError."""
    everything = judge_groups(groups, shipped, stage)
    run = {row.claim.stage for row in everything if row.verdict != "not run"}
    card = [row for row in everything if row.claim.stage in run]  # a stage not run here is another folder's
    if not card:
        found = [repr(g) if g else "none (runs directly in it)" for g in sorted(groups)]
        read = sorted({group for row in everything for group in row.claim.groups})
        raise ConfigError(f"no claims rows under {folder}: no claim finds its confirmation runs there (its runs' "
                          f"group(s): {', '.join(found)}; the claims read group(s) {', '.join(read)}); "
                          f"run `emergence-bench sweep claims-cpu-v2 --out {folder}` first")
    return card if only is None else [row for row in card if row.claim in only]


def judge_folder(folder: Path, only: Sequence[Claim] | None = None, shipped: Rows | None = None,
                 stage: str = "") -> list[ScoreRow]:
    """Every declared claim judged on ``folder``'s rows (Holm over each stage's, as pre-registered),
    then only the rows of ``only`` kept. ``shipped``: a reference's rows of ``stage``, by group,
    filling every (group, mixer) the folder lacks (``filled``); an empty folder then judges them alone."""
    return judge_read(folder, read_folder(folder, shipped), only, shipped, stage)
