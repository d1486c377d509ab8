"""The replication of claims 1, 3 and 8, with claim 2 judged again by the abruptness rule: a new
confirmation on fresh seeds, declared before any of its runs (docs/claims.md, "Replication of claims
1, 3 and 8 (pre-registered)").

The first stage judged these claims at its full alpha (inconclusive), so no boundary declared now
could make the two looks one test. The replication is its own stage: its five rows are one Holm
family at alpha 0.05, judged alone, and never pooled with the first stage's rows, which stay as
they were judged. Its seeds start at ``FIRST_SEED`` = 200, disjoint from every seed the project has
trained (0–47, 100–107); every other setting is the first stage's (``claims-cpu-v2``'s groups
``emergence``, ``patching`` and ``curricula``, on task instances 0 and 1). Each claim's runs a cell
come from the power analysis (``claims.replication_power``); the claims that share the
``emergence`` group read the first seeds of it, as many as their own size. A row gets a verdict only
when every group it reads holds the design's runs, so no look before the end is a test.

The design is hashed (``claims.preregistration``): a test fails when it no longer matches the hash
committed beside the preset.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from emergence_bench.claims.abrupt import ABRUPT, RULE, evaluate_abrupt_by_rule
from emergence_bench.claims.claim import Claim, Evidence, Outcome, Rows, register_claim
from emergence_bench.claims.curricula import CURRICULA
from emergence_bench.claims.design import TASK_SEEDS
from emergence_bench.claims.patching import FEW_HEADS
from emergence_bench.claims.seeds import SEEDS_DIFFER

STAGE = "replication"
PRESET = "claims-cpu-replication"
FIRST_SEED = 200
# Runs a cell (both task instances), from the power analysis at alpha 0.05 / 5 and power 0.8.
RUNS = {"seeds-differ": 88, "abrupt-by-rule": 88, "few-heads": 32, "curricula": 48}

Evaluate = Callable[[Rows, Mapping[str, Any]], Mapping[str, Outcome]]


def seeds(runs: int) -> tuple[int, ...]:
    """The replication's first seeds, enough for ``runs`` runs a cell over the task instances."""
    return tuple(range(FIRST_SEED, FIRST_SEED + runs // len(TASK_SEEDS)))


def whole(evaluate: Evaluate) -> Evaluate:
    """``evaluate``, with each comparison's smallest arm no larger than the runs of the smallest group
    it read: a row whose groups are unfinished reads inconclusive with the count, whatever its p."""
    def judged(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
        fewest = min(len(group) for group in rows.values())
        return {label: replace(found, smallest_arm=fewest if found.smallest_arm is None
                               else min(found.smallest_arm, fewest))
                if isinstance(found, Evidence) else found for label, found in evaluate(rows, settings).items()}
    return judged


def replicated(claim: Claim, runs: int) -> Claim:
    """``claim`` declared again for the replication: the same statistic and settings, its own seeds."""
    settings = MappingProxyType({**claim.settings, "seeds": seeds(runs)})
    return replace(claim, id=f"{claim.id}-{STAGE}", settings=settings, evaluate=whole(claim.evaluate), stage=STAGE)


SEEDS_DIFFER_AGAIN = register_claim(replicated(SEEDS_DIFFER, RUNS["seeds-differ"]))
ABRUPT_BY_RULE = register_claim(Claim(
    f"abrupt-by-rule-{STAGE}", 2, paper=ABRUPT.paper, paper_number=ABRUPT.paper_number, groups=("emergence",),
    statistic="exact binomial test of the share of runs abrupt by the abruptness rule against 1/2",
    effect="share of runs at least half of whose pattern cells with a drop are abrupt by the rule",
    predicts="above 1/2",
    settings=MappingProxyType({"seeds": seeds(RUNS["abrupt-by-rule"]), "task_seeds": TASK_SEEDS, **RULE}),
    evaluate=whole(evaluate_abrupt_by_rule), stage=STAGE))
FEW_HEADS_AGAIN = register_claim(replicated(FEW_HEADS, RUNS["few-heads"]))
CURRICULA_AGAIN = register_claim(replicated(CURRICULA, RUNS["curricula"]))
REPLICATION = (SEEDS_DIFFER_AGAIN, ABRUPT_BY_RULE, FEW_HEADS_AGAIN, CURRICULA_AGAIN)
