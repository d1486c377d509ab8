"""Claim 7's recurrent mixers at their own lr: ``trails-transformer`` declared again on a rerun of the
``recurrent`` group at each mixer's tuned lr, a stage of its own, declared before any of its runs
(docs/claims.md, "The recurrent mixers at their own lr (pre-registered)").

The first stage trained Mamba, Gated DeltaNet and RWKV-7 at the Transformer's lr 1e-3; its row
(``trails-transformer``) stays as judged, labelled so. Here each mixer's lr is chosen by the ranking's
tuning protocol (``execution.tuning``) on the exploration seeds 100–103 of task instance 100, at the
``recurrent`` group's settings, and the group is rerun at that lr on the first stage's seeds and task
instances, as the group ``recurrent-own-lr`` of the preset ``claims-cpu-v2-recurrent`` (swept into the
first stage's folder). Each mixer's emergence step is compared with the ``emergence`` group's
Transformer rows (at 1e-3, not tuned) by the same log-rank test.

Its rows, one per mixer, are one Holm family at alpha 0.05, judged alone: joining the first stage's
family would move the adjusted p of rows already judged. Its design is hashed
(``claims.preregistration``) beside the preset; a test fails when it no longer matches.
"""

from __future__ import annotations

from dataclasses import replace

from emergence_bench.claims.architectures import TRAILS, evaluate_trails_in
from emergence_bench.claims.claim import register_claim
from emergence_bench.claims.design import EXPLORATION_SEEDS, frozen

STAGE = "own-lr"
PRESET = "claims-cpu-v2-recurrent"
GROUP = "recurrent-own-lr"
# The tuning, as the preset declares it (a test holds the two equal): the ranking's protocol.
TUNING = {"tuning_seeds": EXPLORATION_SEEDS, "tuning_task_seeds": (100,), "lr_grid": (3e-4, 1e-3, 3e-3, 1e-2),
          "widen": 2, "prune": True,
          "rule": "success area, then the Kaplan–Meier median emergence step, then the smaller lr"}

TRAILS_OWN_LR = register_claim(replace(
    TRAILS, id=f"{TRAILS.id}-{STAGE}", groups=(GROUP, "emergence"),
    effect="KM median emergence step, the mixer at its own tuned lr over the Transformer (at 1e-3)",
    settings=frozen(width=64, n_layers=1, lr="each mixer's own, tuned", transformer_lr=1e-3, **TUNING),
    evaluate=evaluate_trails_in(GROUP), stage=STAGE))
