"""Claim 4: difficulty grows with the state size S, and is largest at medium sparsity (s ≈ S/2).

- ``grows-with-S`` (cellular automata, ``ca-state-size``): the plateau end over S, Jonckheere's
  trend test (a run still on the plateau at the budget ranks last). The plateau threshold is the
  suite's relative one (a tenth of the gap below the shortcut loss), not the paper's 1.3, which at
  S=6 sits 0.04 below the shortcut (1.34) and at S=4 above it.
- ``medium-sparsity`` (linear map, ``sparsity``): the final eval loss at s = S/2 against both ends
  (s = 1 and s = S − 1); the claim needs both differences positive. p is the larger of the two
  Mann–Whitney p's (an intersection–union test), the effect the smaller difference. Judged twice:
  as the paper trains it, and with ``blank_outputs`` (the control: no output cell can be copied from
  earlier outputs, which at the dense end predict all but one cell).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from emergence_bench.claims import compare
from emergence_bench.claims.claim import (
    Claim,
    NotApplicable,
    Outcome,
    Rows,
    arm,
    config_value,
    final_metric,
    register_claim,
)
from emergence_bench.claims.design import frozen


def evaluate_state_size(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    runs = rows["ca-state-size"]
    sizes = sorted({config_value(r, "task.state_size") for r in runs})
    if len(sizes) < 2:
        return {"": NotApplicable("needs two or more state sizes")}
    arms = [(f"S={s}", arm(runs, task__state_size=s)) for s in sizes]
    return {"": compare.trend(arms, "plateau", "first_drop_step", predicts="increasing")}


def evaluate_sparsity(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    outcomes: dict[str, Outcome] = {}
    cells = sorted({(config_value(r, "task.state_size"), bool(config_value(r, "task.blank_outputs")))
                    for r in rows["sparsity"]})
    for size, blank in cells:
        runs = arm(rows["sparsity"], task__state_size=size)
        runs = [r for r in runs if bool(config_value(r, "task.blank_outputs")) == blank]
        middle, ends = size // 2, (1, size - 1)
        label = f"S={size}" + (", outputs blanked" if blank else "")

        def losses(s: int) -> list[float]:
            return final_metric(arm(runs, task__sparsity=s), "final_eval_loss")

        if not losses(middle) or not all(losses(e) for e in ends):
            outcomes[label] = NotApplicable(f"needs s = 1, {middle} and {size - 1}")
            continue
        against = [compare.values(losses(middle), losses(e), (f"s={middle}", f"s={e}"), predicts="higher")
                   for e in ends]
        weaker = min(against, key=lambda e: e.effect if e.effect is not None else 0.0)
        direction = 1 if all(e.direction > 0 for e in against) else (-1 if all(e.direction < 0 for e in against) else 0)
        outcomes[label] = replace(weaker, p=max(e.p for e in against if e.p is not None), direction=direction,
                                        details="; ".join(e.details for e in against),
                                        data={**against[0].data, **against[1].data})
    return outcomes


GROWS_WITH_S = register_claim(Claim(
    "grows-with-S", 4, paper="Difficulty grows with context length (state size S).",
    paper_number="CA plateau ≈ 60, 380, 400, 650 steps at S = 4, 8, 16, 32", groups=("ca-state-size",),
    statistic="Jonckheere trend test (never-ended plateaus ranked last)",
    effect="P(a run at a larger S left its plateau later than one at a smaller S; 0.5: no trend)",
    predicts="increasing with S",
    settings=frozen(plateau="relative: a tenth of the chance/shortcut-to-floor gap below it"),
    evaluate=evaluate_state_size))
MEDIUM_SPARSITY = register_claim(Claim(
    "medium-sparsity", 4, paper="Difficulty is largest at medium sparsity (s ≈ S/2).",
    paper_number="S=16 hardest near s=8; S=32 nothing learned for 0.125 ≤ s/S ≲ 0.9", groups=("sparsity",),
    statistic="two Mann–Whitney tests (s = S/2 against s = 1 and s = S − 1), the larger p",
    effect="final eval loss at s = S/2 minus that at the nearer end (nats)", predicts="higher at s = S/2",
    settings=frozen(blank_outputs=(False, True)), evaluate=evaluate_sparsity))
