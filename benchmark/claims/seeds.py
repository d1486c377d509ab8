"""Claim 1: emergence is stochastic. At a fixed scale and task instance, seeds differ in when (and
whether) the capability emerges.

The test: within each task instance, each seed's emergence step over the instance's lower median (so two
instances of different difficulty do not read as seed noise), pooled; the spread is the ratio of the
75th to the 25th percentile of those relative steps (a run that never emerged ranks last), with a
bootstrap interval, against ``min_spread`` (a deterministic process spreads only by the eval
interval); p is twice the bootstrap share of resamples on the far side of it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from emergence_bench.claims.claim import (
    Claim,
    Evidence,
    NotApplicable,
    Outcome,
    Rows,
    config_value,
    event_times,
    register_claim,
)
from emergence_bench.claims.design import frozen


def relative_steps(rows: list, field: str = "step") -> list[float]:
    """Each run's emergence step over its task instance's median step (inf: never emerged)."""
    relative = []
    for instance in sorted({config_value(r, "task.task_seed") for r in rows}):
        members = [r for r in rows if config_value(r, "task.task_seed") == instance]
        times, censored = event_times(members, "emergence", field)
        steps = [math.inf if c else t for t, c in zip(times, censored)]
        # The lower median, so half the runs never emerging still leaves a finite scale; when more
        # than half never did, the latest step any run reached (its budget at the latest).
        middle = sorted(steps)[(len(steps) - 1) // 2]
        if not math.isfinite(middle):
            middle = max(times)
        relative += [s / middle for s in steps]
    return relative


def spread(values: np.ndarray) -> np.ndarray:
    """q75 / q25 of each row of ``values`` [R, n] (inf where q75 is a run that never emerged)."""
    q25, q75 = np.quantile(values, [0.25, 0.75], axis=-1, method="inverted_cdf")
    with np.errstate(invalid="ignore"):
        return np.where(np.isinf(q75), np.inf, q75 / q25)


def evaluate(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    runs = list(rows["emergence"])
    relative = np.array(relative_steps(runs))
    if len(relative) < 4:
        return {"": NotApplicable(f"{len(relative)} run(s): too few to measure a spread")}
    rng = np.random.default_rng(0)
    resamples = relative[rng.integers(0, len(relative), (settings["resamples"], len(relative)))]
    observed, replicates = float(spread(relative[None])[0]), spread(resamples)
    low, high = np.quantile(replicates, [0.025, 0.975], method="inverted_cdf")
    # Two-sided: how rarely the resampled spread falls on the other side of min_spread.
    tail = min(np.sum(replicates <= settings["min_spread"]), np.sum(replicates >= settings["min_spread"]))
    p = float(min(1.0, 2 * (1 + tail) / (1 + len(replicates))))
    emerged = int(np.isfinite(relative).sum())
    return {"": Evidence(effect=observed, low=float(low), high=float(high), p=p,
                         direction=1 if observed > settings["min_spread"] else -1, n=str(len(relative)),
                         details=f"{emerged}/{len(relative)} emerged; relative steps "
                                 + ", ".join("never" if math.isinf(v) else f"{v:.2f}" for v in sorted(relative)),
                         data={"emergence step / instance median": relative.tolist()},
                         guides={f"{settings['min_spread']}× (spread of a deterministic process)":
                                 settings["min_spread"]})}


SEEDS_DIFFER = register_claim(Claim(
    "seeds-differ", 1, paper="At fixed scale some seeds solve a task and others never do, and the step at "
    "which a seed solves it varies widely.", paper_number="-", groups=("emergence",),
    statistic="bootstrap interval of q75/q25 of the emergence step relative to its instance's median",
    effect="q75/q25 of the relative emergence step", predicts=f"above {1.25}",
    settings=frozen(min_spread=1.25, resamples=4000), evaluate=evaluate))
