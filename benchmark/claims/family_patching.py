"""Part-1 claim 3 on the language family: a few heads recover most of the gap.

For each seed whose probe emerged between two checkpoints, ``lm-family analyze`` patched the new
checkpoint's attention maps into the old one's: each head alone, ranked by Δp, then the top K
together (``patching.top_k``: K = 1 up to 16 or every head) and every head (``patching.all_heads``).
A seed's fewest heads: the least K of 1, 2, 4, 8, … and every head whose top K recover at least
``MOST`` = 0.8 of the old→new gap in p(answer) (what family.json's ``heads_for_most`` reads, at the
doublings); None where no K does. They are few at most ``FEW_SHARE`` = 1/8 of the model's heads (the
synthetic claim's 4 of 32), and never fewer than ``FEW_AT_LEAST`` = 2 (the probe's circuit is two
heads: a previous-token head and an induction head): 2 of the family's 16 heads, 2 of 8.

The effect is the share of the patched seeds whose fewest heads are few, with its exact
(Clopper–Pearson) interval; the test the exact binomial test against ``SHARE`` = 1/2 (most seeds). A
seed that never emerged, or whose bracketing pair left no gap to recover (below
``analysis.head_patching.GAP_EPS``), has nothing to patch and is not counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, cast

from emergence_bench.claims import compare
from emergence_bench.claims.claim import Claim, NotApplicable, Outcome, Rows
from emergence_bench.claims.family_design import GROUP, STAGE, FamilyRow, analysed, frozen

MOST = 0.8
FEW_SHARE = 1 / 8
FEW_AT_LEAST = 2
SHARE = 0.5


def recovered_by_k(patching: Mapping[str, Any]) -> dict[int, float]:
    """{K: the fraction of the gap the top K heads recover} at K = 1, 2, 4, … and every head ({} where
    nothing was patched or there was no gap)."""
    every = patching.get("all_heads") or {}
    doublings = [row for row in patching.get("top_k", []) if row["k"] & (row["k"] - 1) == 0]  # (a power of 2)
    found = {row["k"]: row["fraction_recovered"] for row in doublings}
    if every:
        found[every["k"]] = every["fraction_recovered"]
    return {k: fraction for k, fraction in sorted(found.items()) if fraction is not None}


def fewest_heads(patching: Mapping[str, Any], most: float) -> int | None:
    """The least K whose top K heads recover at least ``most`` of the gap (None: no K does)."""
    return next((k for k, fraction in recovered_by_k(patching).items() if fraction >= most), None)


def few(heads: int, settings: Mapping[str, Any]) -> int:
    """How many heads of ``heads`` are few: an eighth of them, and at least 2."""
    return max(settings["few_at_least"], int(heads * settings["few_share"]))


def evaluate(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    seeds = analysed(cast(list[FamilyRow], rows[GROUP]))
    patched = [row for row in seeds if recovered_by_k(row["patching"])]
    if not patched:
        return {"": NotApplicable(f"no seed of {len(seeds)} emerged between two checkpoints with a gap to "
                                  "recover: nothing was patched")}
    hits, said = [], []
    for row in patched:
        fewest, heads = fewest_heads(row["patching"], settings["most"]), row["patching"]["all_heads"]["k"]
        hits.append(fewest is not None and fewest <= few(heads, settings))
        curve = ", ".join(f"K={k} {f:.2f}" for k, f in recovered_by_k(row["patching"]).items())
        said.append(f"seed {row['seed']}: {'no K' if fewest is None else fewest} of {heads} ({curve})")
    evidence = compare.rate(hits, settings["share"], f"seeds where few heads recovered {settings['most']:g} of "
                            "the gap", exact=True)
    return {"": replace(evidence, details=f"{evidence.details} ({len(seeds) - len(patched)} not patched); "
                                          + "; ".join(said),
                        smallest_arm=len(patched), guides={"most seeds": settings["share"]})}


FEW_HEADS = Claim(
    "family-few-heads", 3, paper="Patching the attention maps of a few heads from a post-emergence checkpoint into "
    "a pre-emergence one recovers most of the gap in correct-token probability.",
    paper_number="K = 16 heads of Pythia", groups=(GROUP,),
    statistic="exact binomial test of the share of patched seeds whose fewest top-K heads (K = 1, 2, 4, …, every "
              "head) recovering 0.8 of the gap are at most max(2, 1/8 of the heads), against 1/2",
    effect="share of the patched seeds where few heads recovered most of the gap (exact 95% interval)",
    predicts="above 1/2",
    settings=frozen(ks="1, 2, 4, … and every head", most=MOST, few_share=FEW_SHARE, few_at_least=FEW_AT_LEAST,
                    share=SHARE),
    evaluate=evaluate, stage=STAGE)
