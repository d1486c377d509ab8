"""Claim 7: MLP-Mixer learns the linear map far faster than a Transformer but is worse on cellular
automata; Mamba, Gated DeltaNet and RWKV mostly trail the Transformer; depth hurts the linear map
and helps multi-rule cellular automata.

- ``mixer-linear-map`` (``mixers-lm``: S=16, s ∈ {5, 7}, trained and scored on every token as the
  paper's figure): the MLP-Mixer's final full-sequence loss against the Transformer's, per s.
- ``mixer-ca`` (``mixers-ca``): the MLP-Mixer's plateau end against the Transformer's (S=6, from
  ``ca-state-size``).
- ``trails-transformer`` (``recurrent``, with the Transformer rows of ``emergence``): each other
  mixer's emergence step, at the Transformer's lr 1e-3, against the Transformer's, one row per mixer
  found (a plugin's too). ``claims.own_lr`` declares it again at each mixer's own tuned lr.
- ``depth-linear-map`` (``depth``, with the 1-layer rows of ``emergence``) and ``depth-ca``
  (``ca-depth``): the emergence step (linear map) or plateau end (CA) over 1, 2, 4 layers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
from emergence_bench.claims.design import CA_STATE_SIZE, frozen

TRANSFORMER = "transformer"


def evaluate_mixer_linear_map(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    runs = rows["mixers-lm"]
    outcomes: dict[str, Outcome] = {}
    for s in sorted({config_value(r, "task.sparsity") for r in runs}):
        def losses(mixer: str) -> list[float]:
            return final_metric(arm(runs, task__sparsity=s, mixer__name=mixer), "final_eval_full_sequence_loss")

        mixer, transformer = losses("mlp_mixer"), losses(TRANSFORMER)
        outcomes[f"s={s}"] = (compare.values(mixer, transformer, ("MLP-Mixer", "Transformer"), predicts="lower",
                                             unit=" nats")
                              if mixer and transformer else NotApplicable("needs MLP-Mixer and Transformer runs"))
    return outcomes


def evaluate_mixer_ca(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
    mixer = arm(rows["mixers-ca"], mixer__name="mlp_mixer")
    transformer = arm(rows["ca-state-size"], mixer__name=TRANSFORMER, task__state_size=CA_STATE_SIZE)
    if not mixer or not transformer:
        return {"": NotApplicable("needs MLP-Mixer and Transformer runs")}
    return {"": compare.times(mixer, transformer, "plateau", "first_drop_step", ("MLP-Mixer", "Transformer"),
                              predicts="longer")}


def evaluate_trails_in(group: str) -> Callable[[Rows, Mapping[str, Any]], dict[str, Outcome]]:
    """Each mixer of ``group`` but the Transformer against the Transformer's emergence step (the
    ``recurrent`` group at the Transformer's lr; ``recurrent-own-lr`` at each mixer's own)."""
    def evaluate(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
        # The emergence group's Transformer rows, else the group's own (the same seeds and
        # instances: never both, or each run would count twice).
        transformer = arm(rows["emergence"], mixer__name=TRANSFORMER) or arm(rows[group], mixer__name=TRANSFORMER)
        others = sorted({config_value(r, "mixer.name") for r in rows[group]} - {TRANSFORMER})
        if not transformer:
            return {"": NotApplicable("no Transformer rows to compare with (sweep with --mixers transformer,...)")}
        if not others:
            return {"": NotApplicable(f"no mixer other than the Transformer in the {group} group")}
        return {name: compare.times(arm(rows[group], mixer__name=name), transformer, "emergence", "step",
                                    (name, TRANSFORMER), predicts="longer") for name in others}
    return evaluate


evaluate_trails = evaluate_trails_in("recurrent")


def evaluate_depth(group: str, plain: str, measurement: str, field: str,
                   predicts: str) -> Callable[[Rows, Mapping[str, Any]], dict[str, Outcome]]:
    """The depth trend of ``group``, its one-layer (linear map) or two-layer (CA) twin read from ``plain``."""
    def evaluate(rows: Rows, settings: Mapping[str, Any]) -> dict[str, Outcome]:
        twins = rows[plain] if plain == "emergence" else arm(rows[plain], task__state_size=CA_STATE_SIZE)
        runs = [*rows[group], *twins]
        depths = sorted({config_value(r, "model.n_layers") for r in runs})
        if len(depths) < 2:
            return {"": NotApplicable("needs two or more depths")}
        arms = [(f"{d} layer{'s' if d > 1 else ''}", arm(runs, model__n_layers=d)) for d in depths]
        return {"": compare.trend(arms, measurement, field, predicts=predicts)}
    return evaluate


MIXER_LINEAR_MAP = register_claim(Claim(
    "mixer-linear-map", 7, paper="MLP-Mixer learns the linear map far faster than a Transformer.",
    paper_number="final loss 0.40 vs 0.59 (s=5), 0.46 vs 0.59 (s=7), S=16, 10k steps", groups=("mixers-lm",),
    statistic="Mann–Whitney test of the final full-sequence loss", effect="MLP-Mixer minus Transformer (nats)",
    predicts="lower for the MLP-Mixer", settings=frozen(state_size=16, sparsity=(5, 7), train_on="all"),
    evaluate=evaluate_mixer_linear_map, across_mixers=True))
MIXER_CA = register_claim(Claim(
    "mixer-ca", 7, paper="MLP-Mixer is worse than a Transformer on cellular automata.", paper_number="-",
    groups=("mixers-ca", "ca-state-size"), statistic="log-rank test of the plateau end",
    effect="KM median plateau end, MLP-Mixer over Transformer", predicts="longer for the MLP-Mixer",
    settings=frozen(), evaluate=evaluate_mixer_ca, across_mixers=True))
TRAILS = register_claim(Claim(
    "trails-transformer", 7, paper="Mamba, Gated DeltaNet and RWKV mostly trail the Transformer.", paper_number="-",
    groups=("recurrent", "emergence"), statistic="log-rank test of the emergence step",
    effect="KM median emergence step, the mixer at the Transformer's lr (1e-3) over the Transformer",
    predicts="longer for the mixer", settings=frozen(width=64, n_layers=1, lr=1e-3), evaluate=evaluate_trails,
    across_mixers=True))
DEPTH_LINEAR_MAP = register_claim(Claim(
    "depth-linear-map", 7, paper="Depth hurts the linear map.", paper_number="-", groups=("depth", "emergence"),
    statistic="Jonckheere trend test of the emergence step over depth (never-emerged ranked last)",
    effect="P(a deeper run emerged later than a shallower one; 0.5: no trend)", predicts="increasing with depth",
    settings=frozen(depths=(1, 2, 4)),
    evaluate=evaluate_depth("depth", "emergence", "emergence", "step", "increasing")))
DEPTH_CA = register_claim(Claim(
    "depth-ca", 7, paper="Depth helps multi-rule cellular automata.", paper_number="-",
    groups=("ca-depth", "ca-state-size"),
    statistic="Jonckheere trend test of the plateau end over depth",
    effect="P(a deeper run's plateau ended later than a shallower one's; 0.5: no trend)",
    predicts="decreasing with depth", settings=frozen(depths=(1, 2, 4)),
    evaluate=evaluate_depth("ca-depth", "ca-state-size", "plateau", "first_drop_step", "decreasing")))
