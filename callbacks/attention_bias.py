"""AttentionBias: add strength × (the task's ground-truth patterns) to attention logits during training."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import lightning as L
import torch

from emergence_bench.registry import register_callback

if TYPE_CHECKING:
    from emergence_bench.callbacks.contract import MeasuredModel
    from emergence_bench.tasks.base import SyntheticTask


AUTO = "auto"


def _selection(key: str, value: Any, count: int) -> list[int]:
    """``"all"`` or a list of indices → the sorted indices, checked against ``count``."""
    if value == "all":
        return list(range(count))
    chosen = [value] if isinstance(value, int) else list(value)
    bad = [i for i in chosen if not isinstance(i, int) or not 0 <= i < count]
    if bad or not chosen:
        raise ValueError(f"{key} must be 'all' or a non-empty list of indices in [0, {count - 1}], got {value!r}")
    return sorted(set(chosen))


@register_callback("attention_bias")
class AttentionBias(L.Callback):
    """logits += factor(step) · strength · M_h on the chosen layers and heads h.

    M_h [L, L] is one of the task's named ground-truth patterns (``task.pattern(name)``; rows that
    predict a scored token, keys that determine it): ``pattern`` is one name for every biased head,
    a list with one name per biased head (in the order of ``heads``), or ``auto``. ``auto`` (and
    ``layers: auto``) take the task's ``bias_defaults``: the linear map biases every head of every
    layer with ``predict``; cellular automata bias only the first layer, half its heads with
    ``predict`` (the window of the cell being predicted) and half with ``own`` (the window of the
    cell the query holds, which in-context rule inference needs), the other layers staying free to
    look back at earlier matching windows. (Measured: README, "What the suite reproduces".)
    factor is 1 before ``until_step`` (always, when it is null) and 0 after; with
    ``anneal`` it falls linearly from 1 at step 0 to 0 at ``until_step`` (or at max_steps).
    With ``in_eval`` (default) evals see the same bias as training at that step, so eval metrics
    measure the model as it is trained; without it they measure the model alone. The attention
    probe always measures the model's own attention, without the bias.
    A mixer without attention scores gets nothing, and the report says so.
    """

    is_intervention = True

    def __init__(self, task: SyntheticTask, strength: float = 5.0, layers: str | int | Sequence[int] = AUTO,
                 heads: str | int | Sequence[int] = "all", pattern: str | Sequence[str] = AUTO,
                 until_step: int | None = None, anneal: bool = False, in_eval: bool = True) -> None:
        if until_step is not None and until_step < 1:
            raise ValueError(f"attention_bias.until_step must be ≥ 1 or null, got {until_step}")
        for name, value in (("layers", layers), ("heads", heads)):
            if value not in ("all", AUTO) and not isinstance(value, (int, list, tuple)):
                raise ValueError(f"attention_bias.{name} must be 'all', 'auto' or a list of indices, got {value!r}")
        defaults = getattr(task, "bias_defaults", {"layers": "all", "patterns": ("predict",)})
        self.task = task
        self.strength, self.heads = float(strength), heads
        self.layers = defaults["layers"] if layers == AUTO else layers
        self.spread = pattern == AUTO  # auto: the task's patterns in equal blocks of heads
        names = defaults["patterns"] if self.spread else pattern
        self.pattern_names = (names,) if isinstance(names, str) else tuple(names)
        if type(self).pattern is AttentionBias.pattern:  # the task's patterns (distillation has its own)
            for name in set(self.pattern_names):
                task.pattern(name)  # an unknown name fails here, naming the task's patterns
        self.until_step, self.anneal, self.in_eval = until_step, anneal, in_eval
        self.applied: dict[int, list[int]] = {}  # layer -> heads actually biased
        self.applied_patterns: dict[int, list[str]] = {}  # layer -> the pattern of each biased head
        self.not_applicable: str | None = None
        self.steps_applied = 0
        self.first_step: int | None = None
        self.last_step: int | None = None
        self._bias: dict[int, torch.Tensor] = {}

    def pattern(self, layer: int, name: str) -> torch.Tensor:
        """[L, L] the pattern ``name`` added to a head of ``layer`` (times strength)."""
        return self.task.pattern(name).float()

    def plan(self, model: MeasuredModel) -> dict[int, list[tuple[int, str]]]:
        """layer -> [(head, pattern name)] for ``model``; a layer or head it does not have, or a
        pattern list of the wrong length, raises ValueError (``check`` calls this before training)."""
        mixers = model.mixers
        name = getattr(self, "registered_name", "attention_bias")
        plan = {}
        for i in _selection(f"{name}.layers", self.layers, len(mixers)):
            mixer = mixers[i]
            if not getattr(mixer, "exposes_attention", False):
                continue
            if not isinstance(getattr(mixer, "n_heads", None), int):
                raise ValueError(f"{type(mixer).__name__} exposes attention but states no n_heads "
                                 "(the mixer contract, mixers/base.py): the bias cannot choose heads")
            heads = _selection(f"{name}.heads", self.heads, cast(int, mixer.n_heads))  # an int: checked above
            names = list(self.pattern_names)
            if self.spread:  # first block of heads the first pattern, and so on
                names = [names[j * len(names) // len(heads)] for j in range(len(heads))]
            elif len(names) == 1:
                names = names * len(heads)
            elif len(names) != len(heads):
                raise ValueError(f"{name}.pattern lists {len(names)} names but layer {i} biases {len(heads)} "
                                 f"heads ({heads}): give one name per biased head, or one name for all")
            plan[i] = list(zip(heads, names))
        return plan

    check_model = plan  # run.check: a bias naming a layer or head the model lacks fails before training

    def setup(self, trainer: L.Trainer, pl_module: Any, stage: str) -> None:
        mixers = pl_module.model.mixers
        layers = _selection(getattr(self, "registered_name", "attention_bias") + ".layers", self.layers, len(mixers))
        skipped = [f"layer {i} ({type(mixers[i]).__name__})" for i in layers
                   if not getattr(mixers[i], "exposes_attention", False)]
        if skipped:
            self.not_applicable = f"no attention scores in {', '.join(skipped)}"
        for i, chosen in self.plan(pl_module.model).items():
            bias = torch.zeros(mixers[i].n_heads, self.task.seq_len, self.task.seq_len)  # [H, L, L]
            for head, name in chosen:
                bias[head] = self.strength * self.pattern(i, name)
            self._bias[i] = bias.unsqueeze(0).to(pl_module.device)
            self.applied[i] = [head for head, _ in chosen]
            self.applied_patterns[i] = [name for _, name in chosen]

    def on_fit_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        # Lightning calls `setup` before it moves the model to its device; follow it there now.
        self._bias = {i: bias.to(pl_module.device) for i, bias in self._bias.items()}

    def factor(self, step: int, max_steps: int) -> float:
        if self.anneal:
            end = self.until_step or max_steps
            return max(0.0, 1.0 - step / end)
        return 1.0 if self.until_step is None or step < self.until_step else 0.0

    def current(self, step: int, max_steps: int) -> dict[int, torch.Tensor]:
        """layer -> the bias to add at ``step`` (empty when the factor is 0)."""
        factor = self.factor(step, max_steps)
        return {i: bias * factor for i, bias in self._bias.items()} if factor else {}

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: torch.Tensor, batch_idx: int) -> None:
        step = trainer.global_step
        pl_module.attention_bias = self.current(step, trainer.max_steps)
        if pl_module.attention_bias:
            self.steps_applied += 1
            self.first_step = step if self.first_step is None else self.first_step
            self.last_step = step

    def on_validation_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        pl_module.attention_bias = self.current(trainer.global_step, trainer.max_steps) if self.in_eval else {}

    def on_train_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        pl_module.attention_bias = {}

    def report(self) -> dict:
        return {
            "applicable": bool(self.applied),
            "not_applicable": self.not_applicable,
            "strength": self.strength,
            "anneal": self.anneal,
            "until_step": self.until_step,
            "in_eval": self.in_eval,
            "layers": sorted(self.applied),
            "heads": {str(layer): heads for layer, heads in self.applied.items()},
            "patterns": {str(layer): names for layer, names in self.applied_patterns.items()},
            "steps_applied": self.steps_applied,
            "first_step": self.first_step,
            "last_step": self.last_step,
        }

    def state_dict(self) -> dict:
        return {"steps_applied": self.steps_applied, "first_step": self.first_step, "last_step": self.last_step}

    def load_state_dict(self, state: dict) -> None:
        self.steps_applied, self.first_step, self.last_step = (
            state["steps_applied"], state["first_step"], state["last_step"])
