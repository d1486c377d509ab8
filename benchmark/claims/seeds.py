"""Claim 1: emergence is stochastic. At a fixed scale and task instance, seeds differ in when (and
whether) the capability emerges.

The test (``emergence_bench.stats.quartile_ratio``): within each task instance, each seed's emergence
step over the instance's lower median (so two instances of different difficulty do not read as seed
noise), pooled; the spread is the ratio of the 75th to the 25th percentile of those relative steps (a
run that never emerged ranks last), with a bootstrap interval, against ``min_spread`` (a
deterministic process spreads only by the eval interval); p is twice the bootstrap share of
resamples on the far side of it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from emergence_bench.claims.claim import (
    Claim,
    Evidence,
    NotApplicable,
    Outcome,
    Rows,
    config_value,
    event_times,
    never_as_inf,
    register_claim,
)
from emergence_bench.claims.design import frozen
from emergence_bench.stats.quartile_ratio import relative_to_median, spread_test


def relative_steps(rows: list, field: str = "step") -> list[float]:
    """Each run's emergence step over its task instance's lower median step (inf: never emerged;
    ``stats.quartile_ratio.relative_to_median``: where more than half never did, over the latest step
    any run reached)."""
    relative = []
    for instance in sorted({config_value(r, "task.task_seed") for r in rows}):
        members = [r for r in rows if config_value(r, "task.task_seed") == instance]
        times, censored = event_times(members, "emergence", field)
        relative += relative_to_median(never_as_inf(times, censored), max(times))
    return relative


def evaluate(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    runs = list(rows["emergence"])
    relative = relative_steps(runs)
    if len(relative) < 4:
        return {"": NotApplicable(f"{len(relative)} run(s): too few to measure a spread")}
    emerged = sum(math.isfinite(v) for v in relative)
    if not emerged:  # every step censored: the quartile ratio would read inf, a spread nobody measured
        return {"": NotApplicable(f"none of {len(relative)} runs emerged: no step to spread")}
    observed, low, high, p = spread_test(relative, settings["min_spread"], settings["resamples"])
    return {"": Evidence(effect=observed, low=low, high=high, p=p,
                         direction=1 if observed > settings["min_spread"] else -1, n=str(len(relative)),
                         details=f"{emerged}/{len(relative)} emerged; relative steps "
                                 + ", ".join("never" if math.isinf(v) else f"{v:.2f}" for v in sorted(relative)),
                         data={"emergence step / instance median": relative},
                         guides={f"{settings['min_spread']}× (spread of a deterministic process)":
                                 settings["min_spread"]})}


SEEDS_DIFFER = register_claim(Claim(
    "seeds-differ", 1, paper="At fixed scale some seeds solve a task and others never do, and the step at "
    "which a seed solves it varies widely.", paper_number="-", groups=("emergence",),
    statistic="bootstrap interval of q75/q25 of the emergence step relative to its instance's median",
    effect="q75/q25 of the relative emergence step", predicts=f"above {1.25}",
    settings=frozen(min_spread=1.25, resamples=4000), evaluate=evaluate))
