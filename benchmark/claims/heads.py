"""Claim 6: more heads help more than bigger heads; a minimum head dimension is still needed for tasks
that must store context (cellular automata).

At a fixed attention width (64) on the linear map (``heads`` with the 8-head rows of ``emergence``):

- ``more-heads``: the emergence step over the number of heads H ∈ {1, 4, 8, 16, 64}, Jonckheere's
  trend test (a run that never emerged ranks last);
- ``head-dim-1``: the paper's extreme (H = 128, d_head = 1) at CPU width, H = 64 × 1: most runs
  emerge (exact binomial test against 1/2);
- ``independent-heads``: a fit of success = 1 − (1 − p)^H, each head finding the pattern on its own
  with probability p, to the success counts over H (maximum likelihood on a grid of p, a likelihood
  ratio test against one rate per H, H-groups − 1 degrees of freedom);

and on cellular automata (``ca-heads``, fixed width): ``ca-head-dim``: success falls once the head
dimension is below what storing a window of context needs (the trend of leaving the plateau over
head dim, at S=6 with the 8 × 8 rows of ``ca-state-size``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from scipy import stats

from emergence_bench.claims import compare
from emergence_bench.claims.claim import (
    Claim,
    Evidence,
    NotApplicable,
    Outcome,
    Rows,
    arm,
    config_value,
    has_attention,
    register_claim,
)
from emergence_bench.claims.design import CA_STATE_SIZE, frozen
from emergence_bench.results.row import Row, emergence_step
from emergence_bench.stats.significance import trend_test


def by_heads(rows: Rows, group: str) -> list[tuple[int, list[Row]]]:
    """The group's (and the emergence group's) attention rows by their number of heads, sorted."""
    runs = [*rows[group], *rows.get("emergence", ())]
    heads = sorted({config_value(r, "mixer.n_heads") for r in runs if config_value(r, "mixer.n_heads")})
    return [(h, [r for r in runs if config_value(r, "mixer.n_heads") == h]) for h in heads]


def evaluate_more_heads(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    arms = by_heads(rows, "heads")
    if len(arms) < 2 or not has_attention(rows["heads"]):
        return {"": NotApplicable("needs an attention mixer at two or more head counts")}
    return {"": compare.trend([(f"H={h}", runs) for h, runs in arms], "emergence", "step", predicts="decreasing")}


def evaluate_head_dim_1(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    runs = [r for r in rows["heads"] if config_value(r, "mixer.head_dim") == 1]
    if not runs:
        return {"": NotApplicable("no run at head dim 1")}
    return {"": compare.rate([emergence_step(r) is not None for r in runs], 0.5, "emerged at head dim 1")}


def independence_fit(heads: Sequence[int], successes: Sequence[int],
                     trials: Sequence[int]) -> tuple[float, float, float]:
    """(p per head, likelihood-ratio statistic, its p) of success = 1 − (1 − p)^H against one free rate
    per H (df = len(heads) − 1); p by maximum likelihood on a grid of 10⁻⁴."""
    def log_likelihood(rates: Sequence[float]) -> float:
        total = 0.0
        for q, k, n in zip(rates, successes, trials):
            q = min(max(q, 1e-12), 1 - 1e-12)
            total += k * math.log(q) + (n - k) * math.log(1 - q)
        return total

    def model(p: float) -> list[float]:
        return [1 - (1 - p) ** h for h in heads]

    grid = [i / 10_000 for i in range(1, 10_000)]
    best = max(grid, key=lambda p: log_likelihood(model(p)))
    saturated = log_likelihood([k / n for k, n in zip(successes, trials)])
    statistic = max(0.0, 2 * (saturated - log_likelihood(model(best))))
    return best, statistic, float(stats.chi2.sf(statistic, len(heads) - 1))


def evaluate_independent(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    arms = by_heads(rows, "heads")
    if len(arms) < 3 or not has_attention(rows["heads"]):
        return {"": NotApplicable("needs an attention mixer at three or more head counts")}
    heads = [h for h, _ in arms]
    successes = [sum(emergence_step(r) is not None for r in runs) for _, runs in arms]
    trials = [len(runs) for _, runs in arms]
    p, statistic, p_value = independence_fit(heads, successes, trials)
    fitted = ", ".join(f"H={h} {k}/{n} (fit {n * (1 - (1 - p) ** h):.1f})" for h, k, n in zip(heads, successes, trials))
    return {"": Evidence(effect=p, low=None, high=None, p=p_value, direction=0, n="/".join(map(str, trials)),
                         details=f"p per head {p:.4f}, G = {statistic:.2f}; {fitted}",
                         data={f"H={h}": [float(emergence_step(r) is not None) for r in runs] for h, runs in arms})}


def evaluate_ca_head_dim(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    runs = [*rows["ca-heads"], *arm(rows["ca-state-size"], task__state_size=CA_STATE_SIZE)]
    dims = sorted({config_value(r, "mixer.head_dim") for r in runs if config_value(r, "mixer.head_dim")})
    if len(dims) < 2:
        return {"": NotApplicable("needs two or more head dims")}
    arms = [[r for r in runs if config_value(r, "mixer.head_dim") == d] for d in dims]
    successes = [sum(r.get("plateau", {}).get("first_drop_step") is not None for r in a) for a in arms]
    test = trend_test(successes, [len(a) for a in arms], scores=[float(d) for d in dims])
    low_rate, high_rate = successes[0] / len(arms[0]), successes[-1] / len(arms[-1])
    return {"": Evidence(effect=high_rate - low_rate, low=None, high=None, p=test.p,
                         direction=0 if test.statistic == 0 else (1 if test.statistic > 0 else -1),
                         n="/".join(str(len(a)) for a in arms),
                         details=", ".join(f"d_head={d}: {k}/{len(a)} left the plateau"
                                           for d, k, a in zip(dims, successes, arms)),
                         data={f"d_head={d}": [float(r.get("plateau", {}).get("first_drop_step") is not None)
                                               for r in a] for d, a in zip(dims, arms)})}


MORE_HEADS = register_claim(Claim(
    "more-heads", 6, paper="More heads help more than bigger heads.", paper_number="-", groups=("heads", "emergence"),
    statistic="Jonckheere trend test of the emergence step over H (never-emerged ranked last)",
    effect="P(a run with more heads emerged later than one with fewer; 0.5: no trend; fixed width 64)",
    predicts="decreasing with H",
    settings=frozen(width=64, heads=(1, 4, 8, 16, 64)), evaluate=evaluate_more_heads))
HEAD_DIM_1 = register_claim(Claim(
    "head-dim-1", 6, paper="Many heads of dimension 1 still learn the linear map (H = 128, d_head = 1).",
    paper_number="H = 128 × 1", groups=("heads",), statistic="exact binomial test of the success share against 1/2",
    effect="share of H = 64 × 1 runs that emerged", predicts="above 1/2", settings=frozen(width=64),
    evaluate=evaluate_head_dim_1))
INDEPENDENT_HEADS = register_claim(Claim(
    "independent-heads", 6, paper="(Suite's model) each head finds the pattern independently: success = 1 − (1 − p)^H.",
    paper_number="-", groups=("heads", "emergence"), statistic="likelihood-ratio goodness of fit (df = groups − 1)",
    effect="fitted probability p that one head finds the pattern", predicts="fits", settings=frozen(grid=1e-4),
    evaluate=evaluate_independent, kind="fit"))
CA_HEAD_DIM = register_claim(Claim(
    "ca-head-dim", 6, paper="A minimum head dimension is needed for tasks that must store context (cellular automata).",
    paper_number="-", groups=("ca-heads", "ca-state-size"),
    statistic="exact Cochran–Armitage trend test of leaving the plateau over d_head",
    effect="share that left the plateau at the largest head dim minus at the smallest",
    predicts="increasing with d_head",
    settings=frozen(width=64), evaluate=evaluate_ca_head_dim))
