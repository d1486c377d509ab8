"""InfluenceProbe: the attention probe's question for any mixer, answered by perturbation.

Mixers without attention scores (Mamba, Gated DeltaNet, RWKV, MLP-Mixer) still mix tokens. For each
layer, influence[i, j] is how much the mixer's output at position i moves when its input at position
j is nudged: mean over probe sequences of ‖Δ out_i‖ / ε for x_j += ε·u (u a random unit vector).
Each row, normalised over the earlier positions it can see, is read like an attention row: entropy over the
task's probe keys and mass on the true sources, with "pattern found" the first eval at which some
layer puts ≥ ``found_mass`` of a row's influence on the true sources (averaged over scored rows).

Its result-row section (``InfluenceProbeSection``) and its leaderboard column are declared once, in
``emergence_bench.measurements.influence_probe`` (docs/measurements.md walks through it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import lightning as L
import torch

from emergence_bench.callbacks.attention_probe import attention_stats
from emergence_bench.measurements.influence_probe import InfluenceProbeSection
from emergence_bench.mixers.base import MixerContext
from emergence_bench.registry import register_callback

if TYPE_CHECKING:
    from emergence_bench.callbacks.contract import MeasuredModel
    from emergence_bench.tasks.base import SyntheticTask


def _repeat_context(ctx: MixerContext, batch: int, times: int) -> MixerContext:
    """``ctx`` for a batch repeated ``times`` times (shared per-sequence tensors repeated too)."""
    shared = {k: v.repeat(times, *[1] * (v.dim() - 1)) if torch.is_tensor(v) and v.shape[:1] == (batch,) else v
              for k, v in ctx.shared.items()}
    return MixerContext(shared=shared)


@torch.no_grad()
def influence_maps(model: MeasuredModel, tokens: torch.Tensor, epsilon: float = 1e-2, chunk: int = 16,
                   generator: torch.Generator | None = None) -> list[torch.Tensor]:
    """Per layer, influence [L, L] (row i, columns j < i; rows sum to 1, row 0 is empty) of the mixer
    input at j on the mixer output at i, for ``tokens`` [B, L] through ``model`` (the engine's SequenceModel)."""
    captured = []
    hooks = [m.register_forward_hook(lambda module, args, out: captured.append((module, args[0], args[1], out)))
             for m in model.mixers]
    try:
        model(tokens, MixerContext())
    finally:
        for hook in hooks:
            hook.remove()
    maps = []
    for mixer, x, ctx, base in captured:
        B, L, D = x.shape
        direction = torch.randn(B, D, generator=generator).to(x)
        direction = direction / direction.norm(dim=-1, keepdim=True)
        influence = torch.zeros(L, L, dtype=torch.float64, device=x.device)
        for start in range(0, L, chunk):
            positions = range(start, min(L, start + chunk))
            nudged = x.repeat(len(positions), 1, 1)  # [n·B, L, D], block k perturbs position start+k
            for k, j in enumerate(positions):
                nudged[k * B:(k + 1) * B, j] += epsilon * direction
            out = mixer(nudged, _repeat_context(ctx, B, len(positions)))
            moved = (out - base.repeat(len(positions), 1, 1)).norm(dim=-1) / epsilon  # [n·B, L]
            for k, j in enumerate(positions):
                influence[:, j] = moved[k * B:(k + 1) * B].double().mean(0)
        # Causal mixers: anything above the diagonal is float noise. The diagonal goes too: every
        # mixer reads its own position, and the question is which *other* positions it reads.
        influence = influence.tril(-1)
        maps.append((influence / influence.sum(-1, keepdim=True).clamp_min(1e-12)).float())
    return maps


@register_callback("influence_probe")
class InfluenceProbe(L.Callback):
    """At each ``every``-th eval: per layer, the influence map's entropy and true-source mass on the
    scored rows (as AttentionProbe does with attention). Works for every mixer; costs about
    seq_len / chunk extra mixer forwards per layer, so it is off by default."""

    def __init__(self, task: SyntheticTask, found_mass: float = 0.5, probe_size: int = 16, epsilon: float = 1e-2,
                 every: int = 1) -> None:
        if not 0 < found_mass <= 1:
            raise ValueError(f"influence_probe.found_mass must be in (0, 1], got {found_mass}")
        if every < 1 or probe_size < 1 or epsilon <= 0:
            raise ValueError("influence_probe.every and probe_size must be ≥ 1 and epsilon > 0")
        self.task = task
        self.found_mass, self.probe_size, self.epsilon, self.every = found_mass, probe_size, epsilon, every
        self.history: list[dict] = []  # {step, entropy: [per layer], mass: [per layer]}
        self._evals = 0

    def on_fit_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        device = pl_module.device
        self.pattern = self.task.ground_truth_attention().to(device)
        self.keys = self.task.probe_keys().to(device)
        self.rows = self.task.loss_mask.to(device) & (self.pattern.sum(-1) > 0)

    def measure(self, pl_module: Any) -> tuple[list[float], list[float]]:
        tokens = self.task.batch("eval", 0)[: self.probe_size].to(pl_module.device)
        generator = torch.Generator().manual_seed(0)  # the same nudges at every eval
        entropy, mass = [], []
        inputs = self.task.model_inputs(tokens)
        for influence in influence_maps(pl_module.model, inputs, self.epsilon, generator=generator):
            e, m = attention_stats(influence[None, None], self.pattern, self.keys, self.rows)
            entropy.append(float(e[0]))
            mass.append(float(m[0]))
        return entropy, mass

    def on_validation_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        self._evals += 1
        if (self._evals - 1) % self.every:
            return
        entropy, mass = self.measure(pl_module)
        self.history.append({"step": trainer.global_step, "entropy": entropy, "mass": mass})
        experiment = getattr(trainer.logger, "experiment", None)
        if experiment is not None and hasattr(experiment, "add_scalar"):
            for layer, (e, m) in enumerate(zip(entropy, mass)):
                experiment.add_scalar(f"influence_entropy/L{layer}", e, trainer.global_step)
                experiment.add_scalar(f"influence_mass/L{layer}", m, trainer.global_step)

    def report(self) -> InfluenceProbeSection:
        found = next((h["step"] for h in self.history if max(h["mass"]) >= self.found_mass), None)
        last = self.history[-1] if self.history else {"entropy": [], "mass": []}
        return {
            "found_mass": self.found_mass,
            "pattern_found_step": found,
            "censored": found is None,
            "final_entropy": last["entropy"],
            "final_mass": last["mass"],
            "history": [[h["step"], max(h["mass"]), min(h["entropy"])] for h in self.history],
        }

    def state_dict(self) -> dict:
        return {"history": self.history, "evals": self._evals}

    def load_state_dict(self, state: dict) -> None:
        self.history, self._evals = list(state["history"]), state["evals"]
