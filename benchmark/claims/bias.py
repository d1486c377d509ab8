"""Claim 5: adding the ground-truth pattern to the attention logits removes the loss plateau, and not
just any bias does.

The ``bias`` group runs the linear map with the attention bias on three patterns: the true one
(``predict``), a placebo (as many keys per row, drawn among the row's non-sources) and a near miss
(each true source moved by one key); its unbiased twin is the ``emergence`` group's rows. Each
comparison is the plateau end (KM median ratio, log-rank): the true pattern against no bias, against
the placebo and against the near miss. Needs attention scores.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from emergence_bench.claims import compare
from emergence_bench.claims.claim import Claim, NotApplicable, Outcome, Rows, arm, has_attention, register_claim
from emergence_bench.claims.design import frozen


def evaluate(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    if not has_attention(rows["bias"]):
        return {"": NotApplicable("the mixer exposes no attention scores to bias")}
    true = arm(rows["bias"], callbacks__attention_bias__pattern="predict")
    against = {"none": list(rows["emergence"]),
               "placebo": arm(rows["bias"], callbacks__attention_bias__pattern="placebo"),
               "near miss": arm(rows["bias"], callbacks__attention_bias__pattern="near_miss")}
    if not true:
        return {"": NotApplicable("no run with the true pattern")}
    return {f"vs {name}": compare.times(true, other, "plateau", "first_drop_step", ("true bias", name)) if other
            else NotApplicable(f"no {name} runs") for name, other in against.items()}


BIAS = register_claim(Claim(
    "bias-removes-plateau", 5, paper="Adding the ground-truth pattern to the attention logits (an attention bias) "
    "removes the loss plateau.", paper_number="CA plateau ≈ 60–200 steps with the bias for every S",
    groups=("bias", "emergence"), statistic="log-rank test of the plateau end",
    effect="KM median plateau end, true bias over the other arm", predicts="shorter with the true pattern",
    settings=frozen(strength=5.0, placement="every head of every layer"), evaluate=evaluate))
