"""AttentionProbe: per layer and head, how diffuse is attention and how much of it sits on the truth?
(Its section and leaderboard column: ``emergence_bench.measurements.attention_probe``.)"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
import torch

from emergence_bench.callbacks.emergence import Emergence
from emergence_bench.mixers.base import MixerContext
from emergence_bench.registry import register_callback
from emergence_bench.results.atomic import write_atomic
from emergence_bench.results.store import MAPS_FILE

if TYPE_CHECKING:
    from emergence_bench.callbacks.contract import MeasuredModule
    from emergence_bench.tasks.base import SyntheticTask


def attention_stats(probs: torch.Tensor, pattern: torch.Tensor, keys: torch.Tensor,
                    rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Entropy and true-source mass of attention maps, averaged over sequences and probed rows.

    probs [B, H, L, L] attention probabilities; pattern [L, L] 0/1 ground truth; keys [L, L] bool,
    the keys entropy is measured over (renormalised there); rows [L] bool, the rows probed.
    Returns (entropy [H] in nats, mass [H]: the attention each row puts on its true sources).
    """
    p = probs[:, :, rows].double()  # [B, H, R, L]
    mass = (p * pattern[rows].double()).sum(-1).mean(dim=(0, 2))
    within = p * keys[rows].double()
    within = within / within.sum(-1, keepdim=True).clamp_min(1e-12)
    entropy = -(within * within.clamp_min(1e-12).log()).sum(-1).mean(dim=(0, 2))
    return entropy.float(), mass.float()


MOMENTS = ("start", "pattern found", "emergence", "end")  # the filmstrip's frames, in order


def _emerged(trainer: Any, pl_module: MeasuredModule) -> bool:
    """Whether this eval's accuracy reached τ of the run's emergence callback (False without one)."""
    last = getattr(pl_module, "last_eval", None)
    for callback in trainer.callbacks:
        if isinstance(callback, Emergence) and last is not None:
            return last.accuracy >= callback.threshold
    return False



@register_callback("attention_probe")
class AttentionProbe(L.Callback):
    """At each eval, runs the model on ``probe_size`` eval sequences with attention captured and
    records per layer and head the entropy (on the scored rows, over ``task.probe_keys()``) and the
    mass on the true sources. "Pattern found" = the first eval step where some head puts ≥
    ``found_mass`` on the true sources. Logs TensorBoard scalars, and every ``image_every`` evals an
    image per layer: each head's mean attention map beside the ground truth. At the end of training
    it saves the last maps to ``<run dir>/attention_maps.pt`` ({"layers", "maps" [layer][H, L, L],
    "ground_truth" [L, L], "step"}) for reports, and under "moments" the maps at four moments: the
    start (before the first step), pattern found, emergence (the first eval whose accuracy reached the
    emergence callback's τ, when one is configured) and the end ([{"moment", "step", "maps"}]).
    Mixers without attention scores are reported as not applicable.
    """

    def __init__(self, task: SyntheticTask, found_mass: float = 0.5, image_every: int = 10,
                 probe_size: int = 64) -> None:
        if not 0 < found_mass <= 1:
            raise ValueError(f"attention_probe.found_mass must be in (0, 1], got {found_mass}")
        self.task = task
        self.found_mass, self.image_every, self.probe_size = found_mass, image_every, probe_size
        self.history: list[dict] = []  # {step, entropy: [[per head] per layer], mass: [...]}
        self.not_applicable: str | None = None
        self._evals = 0
        self._moments: dict[str, tuple[int, list]] = {}  # moment -> (step, maps [layer][H, L, L])

    def setup(self, trainer: L.Trainer, pl_module: Any, stage: str) -> None:
        mixers = pl_module.model.mixers
        self.layers = [i for i, m in enumerate(mixers) if getattr(m, "exposes_attention", False)]
        if not self.layers:
            self.not_applicable = f"{type(mixers[0]).__name__} exposes no attention scores"
            return
        self.pattern = self.task.ground_truth_attention().to(pl_module.device)
        self.keys = self.task.probe_keys().to(pl_module.device)
        self.rows = (self.task.loss_mask.to(pl_module.device) & (self.pattern.sum(-1) > 0))

    def on_fit_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        # Lightning calls `setup` before it moves the model to its device; follow it there now.
        if not self.not_applicable:
            device = pl_module.device
            self.pattern, self.keys, self.rows = (t.to(device) for t in (self.pattern, self.keys, self.rows))

    @torch.no_grad()
    def measure(self, pl_module: MeasuredModule) -> tuple[list, list, dict]:
        tokens = self.task.batch("eval", 0)[: self.probe_size].to(pl_module.device)
        ctx = MixerContext(capture=True)
        pl_module.model(self.task.model_inputs(tokens), ctx)
        entropy, mass = [], []
        for layer in self.layers:
            e, m = attention_stats(ctx.attention[layer], self.pattern, self.keys, self.rows)
            entropy.append(e.tolist())
            mass.append(m.tolist())
        return entropy, mass, ctx.attention

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        if not self.not_applicable and "start" not in self._moments:  # a resumed run has its start
            self._moments["start"] = (trainer.global_step, self._maps(self.measure(pl_module)[2]))

    def _maps(self, attention: dict) -> list[torch.Tensor]:
        return [attention[layer].mean(0).float().cpu() for layer in self.layers]

    def on_validation_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if trainer.sanity_checking or self.not_applicable:
            return
        entropy, mass, attention = self.measure(pl_module)
        self._last_maps = self._maps(attention)
        step = trainer.global_step
        self.history.append({"step": step, "entropy": entropy, "mass": mass})
        if max(max(m) for m in mass) >= self.found_mass:
            self._moments.setdefault("pattern found", (step, self._last_maps))
        if _emerged(trainer, pl_module):
            self._moments.setdefault("emergence", (step, self._last_maps))
        experiment = getattr(trainer.logger, "experiment", None)
        if experiment is not None and hasattr(experiment, "add_scalar"):
            for layer, e_heads, m_heads in zip(self.layers, entropy, mass):
                for head, (e, m) in enumerate(zip(e_heads, m_heads)):
                    experiment.add_scalar(f"probe_entropy/L{layer}H{head}", e, step)
                    experiment.add_scalar(f"probe_mass/L{layer}H{head}", m, step)
            if self._evals % self.image_every == 0:
                for layer in self.layers:
                    experiment.add_image(f"attention/L{layer}", self.image(attention[layer]), step)
        self._evals += 1

    def on_train_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        maps = getattr(self, "_last_maps", None)
        if maps is None or not trainer.default_root_dir:
            return
        moments = {**self._moments, "end": (self.history[-1]["step"], maps)}
        saved = {"layers": self.layers, "maps": maps, "ground_truth": self.pattern.cpu(),
                 "step": self.history[-1]["step"],
                 "moments": [{"moment": name, "step": moments[name][0], "maps": moments[name][1]}
                             for name in MOMENTS if name in moments]}
        # atomic: a report never reads half a file
        write_atomic(Path(trainer.default_root_dir) / MAPS_FILE, lambda f: torch.save(saved, f))

    def image(self, probs: torch.Tensor) -> torch.Tensor:
        """[1, L, (H + 1)(L + 1)] grey image: each head's mean map, then the ground truth."""
        maps = list(probs.mean(0).float().cpu()) + [self.pattern.float().cpu()]
        gap = torch.ones(maps[0].shape[0], 1)
        panels = [torch.cat([m / m.max().clamp_min(1e-12), gap], dim=1) for m in maps]
        return torch.cat(panels, dim=1).unsqueeze(0)

    def report(self) -> dict:
        if self.not_applicable:
            return {"applicable": False, "not_applicable": self.not_applicable}
        found = next((h["step"] for h in self.history
                      if max(max(m) for m in h["mass"]) >= self.found_mass), None)
        last = self.history[-1] if self.history else {"entropy": [], "mass": []}
        best = max(((m, layer, head) for layer, heads in zip(self.layers, last["mass"])
                    for head, m in enumerate(heads)), default=(None, None, None))
        return {
            "applicable": True,
            "layers": self.layers,
            "found_mass": self.found_mass,
            "pattern_found_step": found,
            "censored": found is None,
            "best_head": None if best[1] is None else {"layer": best[1], "head": best[2], "mass": best[0]},
            "final_entropy": last["entropy"],
            "final_mass": last["mass"],
            "history": [[h["step"], max(max(m) for m in h["mass"]),
                         min(min(e) for e in h["entropy"])] for h in self.history],
        }

    def state_dict(self) -> dict:  # the maps too: a resumed run saves the same attention_maps.pt
        return {"history": self.history, "evals": self._evals,
                "moments": {name: [step, maps] for name, (step, maps) in self._moments.items()},
                "last_maps": getattr(self, "_last_maps", None)}

    def load_state_dict(self, state: dict) -> None:
        self.history, self._evals = list(state["history"]), state["evals"]
        self._moments = {name: (step, maps) for name, (step, maps) in state.get("moments", {}).items()}
        if state.get("last_maps") is not None:
            self._last_maps = state["last_maps"]
