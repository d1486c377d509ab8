"""The language family's Part-1 scorecard: its three declared claims judged on the family's analysis
rows, as ``claims.judge`` judges a sweep's.

Why here, on rows: the claims read ``analyze pythia``'s rows (``family_design``), so they sit in
claims/ beside the synthetic ones. ``lm-family analyze`` (analysis/, a layer below) writes those rows
and family.json; the command above both hands it ``scorecard`` as a callable
(``family_analysis.FamilyJudge``), so no import goes up.

- No row of the declared measurement (``family_design.declared_rows``): every claim reads ``not
  run``, with what the rows measured instead.
- A claim read on fewer seeds than ``MIN_SEEDS`` reads ``inconclusive`` with its numbers and the
  count, and stays out of the Holm family (as an unfinished arm does in the synthetic scorecard); one
  with nothing to measure (no seed emerged) reads ``inconclusive`` with the reason.
- The rest: p Holm-adjusted over the three rows (one family, alpha 0.05), and the verdict by
  ``claims.judge.verdict``: agrees at an adjusted p < 0.05 the paper's way, disagrees the other way,
  inconclusive otherwise.

Power, known before the family trains: a share of n seeds all one way has an exact two-sided p of
2^(1 − n), and Holm's first step asks for p < 0.05 / 3, so claims 2 and 3 need at least 7 seeds (that
emerged, that were patched) for a verdict; at the family's default 4 seeds they can only read
inconclusive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from emergence_bench.claims.claim import Evidence, NotApplicable
from emergence_bench.claims.family_design import GROUP, MIN_SEEDS, STAGE, FamilyRow, declared_rows
from emergence_bench.claims.family_preregistration import DECLARED, check, record
from emergence_bench.claims.judge import ALPHA, ScoreRow, verdict
from emergence_bench.claims.preregistration import digest
from emergence_bench.stats.significance import holm


def judge_family(rows: Sequence[FamilyRow]) -> list[ScoreRow]:
    """The declared claims judged on the family's analysis rows (every probe's; the declared one is read)."""
    picked, missing = declared_rows(rows)
    if not picked:
        return [ScoreRow(claim, "", None, None, "not run", missing) for claim in DECLARED]
    failed = [str(row["seed"]) for row in picked if row["status"] != "ok"]
    note = f"; seed(s) {', '.join(failed)} failed to analyse, left out" if failed else ""
    outcomes = [claim.evaluate({GROUP: picked}, claim.settings)[""] for claim in DECLARED]
    enough = [isinstance(o, Evidence) and (o.smallest_arm or 0) >= MIN_SEEDS for o in outcomes]
    adjusted = holm([o.p if ok and isinstance(o, Evidence) else None for o, ok in zip(outcomes, enough)])
    card = []
    for claim, outcome, ok, p in zip(DECLARED, outcomes, enough, adjusted):
        if isinstance(outcome, NotApplicable):
            card.append(ScoreRow(claim, "", outcome, None, "inconclusive", outcome.reason + note))
        elif not ok:
            card.append(ScoreRow(claim, "", outcome, None, "inconclusive", f"{outcome.smallest_arm} seed(s): "
                                 f"a verdict needs at least {MIN_SEEDS}, as declared" + note))
        else:
            found, why = verdict(claim, outcome, p)
            card.append(ScoreRow(claim, "", outcome, p, found, why + note))
    return card


def scorecard(rows: Sequence[FamilyRow]) -> dict[str, Any]:
    """The scorecard as family.json records it: the declaration's sha256 (and whether it is still the
    committed one), alpha, and each claim's row (``ScoreRow.to_dict``: its numbers, verdict, settings)."""
    return {"stage": STAGE, "declared_sha256": digest(record()), "declaration": check() or "as committed",
            "alpha": ALPHA, "rows": [row.to_dict() for row in judge_family(rows)]}
