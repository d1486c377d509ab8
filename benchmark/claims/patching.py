"""Claim 3: patching the attention maps of a few heads from a post-emergence checkpoint into a
pre-emergence one recovers most of the gap in correct-token probability.

The ``patching`` group trains a 2-layer, 16-head linear-map model with checkpoints on a fixed grid.
For each run that emerged, ``claims`` runs ``analyze patch`` between the last checkpoint before its
emergence step and the first at or after it (``bracket``: the pair a bisection over checkpoints ends
on, one eval apart), with K = 1, 2, 4, 8, 16 heads and the ground-truth pattern, and hands the
reports to this claim as the row's ``patching`` section: {"top_k": [{k, fraction_recovered}],
"ground_truth": fraction}. (On the exploration seeds, a wider bracket, from where the run's loss
began to fall, recovered 2–7% with 16 heads: the values and MLPs had moved too.)

The test: the fraction of the gap the top ``k`` heads recover, per run, against 1/2 (a sign test):
most of the gap from an eighth of the 32 heads.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any, cast

from emergence_bench.claims import compare
from emergence_bench.claims.claim import Claim, Evidence, NotApplicable, Outcome, Rows, has_attention, register_claim
from emergence_bench.claims.design import frozen
from emergence_bench.results.row import Row, emergence_step
from emergence_bench.stats.significance import sign_test

KS = (1, 2, 4, 8, 16)


def bracket(row: Row, checkpoints: Sequence[int]) -> tuple[int, int] | None:
    """(old, new) checkpoint steps around the run's emergence: the last checkpoint before its
    emergence step and the first at or after it; None where it never emerged or the checkpoints do
    not bracket it."""
    step = emergence_step(row)
    if step is None:
        return None
    old = [c for c in checkpoints if c < step]
    new = [c for c in checkpoints if c >= step]
    return (old[-1], new[0]) if old and new else None


def report(row: Row) -> Mapping[str, Any]:
    """The ``patching`` section the judgement attached to the row ({} where it patched none)."""
    return cast(Mapping[str, Any], row).get("patching") or {}


def recovered(row: Row, k: int) -> float | None:
    """The fraction of the gap the top ``k`` heads recovered in this run (None: not patched)."""
    return next((t["fraction_recovered"] for t in report(row).get("top_k", []) if t["k"] == k), None)


def evaluate(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    runs = rows["patching"]
    if not has_attention(runs):
        return {"": NotApplicable("the mixer exposes no attention scores to patch")}
    k = settings["k"]
    fractions = [f for f in (recovered(r, k) for r in runs) if f is not None]
    if len(fractions) < 2:
        return {"": NotApplicable(f"{len(fractions)} run(s) emerged between two checkpoints and were patched "
                                   "(`claims DIR --patch` patches them)")}
    curve = {kk: statistics.median(f for f in (recovered(r, kk) for r in runs) if f is not None) for kk in KS
             if any(recovered(r, kk) is not None for r in runs)}
    truth = [report(r)["ground_truth"] for r in runs if report(r).get("ground_truth") is not None]
    median, low, high = compare.median_interval(fractions)
    return {"": Evidence(effect=median, low=low, high=high,
                         p=sign_test([f - settings["most"] for f in fractions]).p,
                         direction=1 if median > settings["most"] else -1, n=str(len(fractions)),
                         details="median recovered by the top K: "
                                 + ", ".join(f"K={kk} {v:.2f}" for kk, v in curve.items())
                                 + (f"; ground-truth pattern {statistics.median(truth):.2f}" if truth else ""),
                         data={f"top {k} heads: fraction recovered": fractions},
                         guides={"most of the gap": settings["most"]})}


FEW_HEADS = register_claim(Claim(
    "few-heads", 3, paper="Patching the attention maps of a few heads from a post-emergence checkpoint into a "
    "pre-emergence one recovers most of the gap in correct-token probability.", paper_number="K = 16 heads of Pythia",
    groups=("patching",), statistic="sign test of the fraction recovered against 1/2",
    effect="median fraction of the old→new gap in p(correct) the top 4 of 32 heads recover", predicts="above 1/2",
    settings=frozen(k=4, most=0.5), evaluate=evaluate))
