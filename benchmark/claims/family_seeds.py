"""Part-1 claim 1 on the language family: seeds differ in when the probe emerges.

The statistic is the synthetic claim 1's (``claims.seeds``, ``stats.quartile_ratio``): the ratio of
the 75th to the 25th percentile of the seeds' emergence steps (a seed that never emerged ranks last,
as inf), with a percentile bootstrap 95% interval, and p twice the bootstrap share of resamples on
the far side of a floor. A family is one task instance, so the steps are not divided by an
instance's median (the ratio would not change). Steps are training steps; in tokens each is a fixed
multiple (batch × context), so the ratio is the same.

The floor. A bisected step is known only to its bracket (last unsolved, first solved checkpoint], and
the checkpoints are log-spaced (4 a doubling: from step 20 or so each bracket spans a factor
2^(1/4) ≈ 1.19), so seeds that all emerged at one true step can read a spread of up to one bracket.
The true spread is at least the observed one over the widest bracket b. The floor is therefore
``min_true_spread`` (1.25, the synthetic claim's floor) × b: 1.49 at 4 checkpoints a doubling. A
spread above it is more than the checkpoints can make of identical seeds, by the synthetic claim's
margin.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

from emergence_bench.claims.claim import Claim, Evidence, NotApplicable, Outcome, Rows
from emergence_bench.claims.family_design import GROUP, STAGE, FamilyRow, analysed, emerged, frozen
from emergence_bench.stats.quartile_ratio import spread_test

MIN_TRUE_SPREAD = 1.25


def emergence_step(row: FamilyRow) -> float:
    """The seed's bisected emergence step: the first checkpoint that solves the probe (inf: never)."""
    step = row["emergence"]["first_solved"]
    return math.inf if step is None else float(step)


def bracket_width(row: FamilyRow) -> float:
    """How precisely the bisection knows an emerged seed's step: first solved over last unsolved
    checkpoint (inf where it solved at the first checkpoint, or right after step 0)."""
    old, new = row["emergence"]["last_unsolved"], row["emergence"]["first_solved"]
    return new / old if old else math.inf


def evaluate(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    seeds = analysed(cast(list[FamilyRow], rows[GROUP]))
    solved = [row for row in seeds if emerged(row)]
    if not solved:
        return {"": NotApplicable(f"no seed of {len(seeds)} emerged: no step to spread")}
    widest = max(bracket_width(row) for row in solved)
    if not math.isfinite(widest):
        return {"": NotApplicable("a seed solved the probe at its first checkpoint after step 0: "
                                  "its step is not resolved")}
    floor = settings["min_true_spread"] * widest
    steps = [emergence_step(row) for row in seeds]
    observed, low, high, p = spread_test(steps, floor, settings["resamples"], settings["bootstrap_seed"])
    shown = ", ".join(f"seed {row['seed']} " + ("never" if math.isinf(s) else f"{s:.0f}")
                      for row, s in sorted(zip(seeds, steps), key=lambda pair: pair[1]))
    return {"": Evidence(effect=observed, low=low, high=high, p=p, direction=1 if observed > floor else -1,
                         n=str(len(seeds)), smallest_arm=len(seeds),
                         details=f"{len(solved)}/{len(seeds)} emerged; steps {shown}; floor {floor:.2f} = "
                                 f"{settings['min_true_spread']} × the widest bracket {widest:.3f}",
                         data={"emergence step": steps},
                         guides={f"{floor:.2f}× (what the checkpoints make of identical seeds, × "
                                 f"{settings['min_true_spread']})": floor})}


SEEDS_DIFFER = Claim(
    "family-seeds-differ", 1, paper="At a fixed scale some seeds solve a task and others never do, and the step at "
    "which a seed solves it varies widely.", paper_number="-", groups=(GROUP,),
    statistic="bootstrap interval of q75/q25 of the seeds' bisected emergence steps (never: last), against a floor",
    effect="q75/q25 of the emergence step over seeds",
    predicts="above 1.25 × the widest bisection bracket",
    settings=frozen(min_true_spread=MIN_TRUE_SPREAD, floor="min_true_spread × the widest bracket (first solved / "
                    "last unsolved checkpoint) among the seeds that emerged", never="ranks last (inf)",
                    resamples=4000, bootstrap_seed=0),
    evaluate=evaluate, stage=STAGE)
