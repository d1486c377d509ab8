"""Part-1 claim 2 on the language family: the heads jump with the emergence.

Per seed whose probe emerged, its top induction head: the head whose induction score
(``analysis.head_scores``: its mass, in a repeated random string, on the token that followed the
query's token the first time; about 0.02 when diffuse, near 1 with the pattern) is the highest at any
checkpoint (ties: the first in (layer, head) order). The curve is that head's score at every
checkpoint. The seed's head jumps with its emergence when both hold:

1. its rise is abrupt by the suite's abruptness rule (``stats.transition_fit``, frozen: a plateau
   then a logistic rise beats a power law and an exponential from step 0 by at least 10 in BIC, spans
   at most 0.3 decades, and begins after at least 3 checkpoints), and it rises by at least
   ``MIN_RISE`` = 0.1 (five times the diffuse score; the family's summary times its heads' rises from
   the same 0.1);
2. its onset (the rise's 10% point) lies within ``WINDOW_OCTAVES`` = 1 of the seed's bisected
   emergence step: from half the step to twice it. At 4 checkpoints a doubling that is 4 checkpoints
   either side: room for the bracket (one) and for an abrupt rise's own span from onset to end (up to
   0.3 decades, about a doubling), which may begin before the probe is solved.

The effect is the share of those seeds where both hold, with its exact (Clopper–Pearson) interval;
the test the exact binomial test against ``SHARE`` = 1/2 (most seeds), as the synthetic claim 2's
share of abrupt runs. A seed that never emerged has no step for its head to jump with, and is not
counted here (claim 1 counts it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from emergence_bench.claims import compare
from emergence_bench.claims.claim import Claim, NotApplicable, Outcome, Rows
from emergence_bench.claims.family_design import GROUP, STAGE, FamilyRow, analysed, emerged, frozen
from emergence_bench.stats.transition_fit import MAX_DECADES, MIN_EVIDENCE, MIN_PLATEAU_EVALS, fit_transition

MIN_RISE = 0.1
WINDOW_OCTAVES = 1.0
SHARE = 0.5

History = Sequence[tuple[int, Mapping[str, list[list[float]]]]]  # [(step, {"induction": [layer][head], ...})]


def top_induction_head(history: History) -> tuple[int, int]:
    """(layer, head) of the highest induction score at any checkpoint (the first such in order)."""
    heads = [(layer, head) for layer, row in enumerate(history[0][1]["induction"]) for head in range(len(row))]
    return max(heads, key=lambda h: max(grid["induction"][h[0]][h[1]] for _, grid in history))


def head_curve(history: History, head: tuple[int, int]) -> tuple[list[int], list[float]]:
    """The head's induction score at every checkpoint: (steps [n], scores [n])."""
    layer, index = head
    return [step for step, _ in history], [grid["induction"][layer][index] for _, grid in history]


def jump(row: FamilyRow, settings: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether the seed's top induction head rose abruptly, by the rule, within the window of its
    emergence step; and what it did, in words."""
    history = row["head_scores"]["history"]
    head = top_induction_head(history)
    steps, scores = head_curve(history, head)
    rise = fit_transition(steps, [-s for s in scores], min_drop=settings["min_rise"])  # (a rise, as a drop)
    step = row["emergence"]["first_solved"]
    name = f"seed {row['seed']} L{head[0]}H{head[1]} (best {max(scores):.2f})"
    if rise is None or not rise.abrupt:
        return False, f"{name}: no abrupt rise"
    near = rise.onset > 0 and abs(math.log2(rise.onset / step)) <= settings["window_octaves"]
    return near, f"{name}: abrupt from {rise.onset:.0f}, emerged at {step}" + ("" if near else ", outside the window")


def evaluate(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    seeds = analysed(cast(list[FamilyRow], rows[GROUP]))
    solved = [row for row in seeds if emerged(row) and row.get("head_scores")]
    if not solved:
        return {"": NotApplicable(f"no seed of {len(seeds)} emerged with its heads scored: "
                                  "no step for a head to jump with")}
    hits, said = zip(*(jump(row, settings) for row in solved))
    evidence = compare.rate(hits, settings["share"], "seeds whose top induction head jumped with the emergence",
                            exact=True)
    return {"": replace(evidence, details=f"{evidence.details} ({len(seeds) - len(solved)} never emerged); "
                                          + "; ".join(said),
                        smallest_arm=len(solved), guides={"most seeds": settings["share"]})}


HEADS_JUMP = Claim(
    "family-heads-jump", 2, paper="Emergence coincides with attention heads jumping from diffuse to sparse patterns "
    "that match the task.", paper_number="-", groups=(GROUP,),
    statistic="exact binomial test of the share of seeds whose top induction head rose abruptly (by the rule) "
              "within an octave of the emergence step, against 1/2",
    effect="share of the seeds that emerged whose top induction head jumped with it (exact 95% interval)",
    predicts="above 1/2",
    settings=frozen(head="the highest induction score at any checkpoint", min_rise=MIN_RISE,
                    rule={"min_evidence": MIN_EVIDENCE, "max_decades": MAX_DECADES,
                          "min_plateau_evals": MIN_PLATEAU_EVALS},
                    window_octaves=WINDOW_OCTAVES, window="the rise's 10% point within a factor 2^window "
                    "of the bisected emergence step", share=SHARE),
    evaluate=evaluate, stage=STAGE)
