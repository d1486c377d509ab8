"""EmergenceModule: trains a SequenceModel on a task's scored tokens and measures it."""

from __future__ import annotations

import math
from collections import deque

import lightning as L
import torch
import torch.nn.functional as F
import torchmetrics

from benchmark.config import OptimConfig
from benchmark.model import SequenceModel
from mixers.base import MixerContext
from tasks.base import SyntheticTask


class Diverged(RuntimeError):
    """The training loss became NaN or infinite."""


class EmergenceModule(L.LightningModule):
    """Cross-entropy over ``task.loss_mask``; AdamW with warmup and a schedule.

    Logs ``train/loss`` and, at each eval, ``eval/loss``, ``eval/accuracy`` (greedy, scored tokens),
    ``eval/p_correct`` (mean probability of the correct token) and per output cell accuracy. The last
    eval is kept in ``last_eval`` for callbacks: {loss, accuracy, p_correct, cell_accuracy [C],
    cell_loss [C]}.

    ``attention_bias`` (layer -> logits bias) is applied to training and eval forwards; interventions
    set it.
    """

    def __init__(self, model: SequenceModel, task: SyntheticTask, optim: OptimConfig, max_steps: int):
        super().__init__()
        self.model = model
        self.task = task
        self.optim = optim
        self.max_steps = max_steps
        self.register_buffer("loss_mask", task.loss_mask.clone(), persistent=False)
        self.register_buffer("output_cell", task.output_cell.clone(), persistent=False)
        self.num_cells = task.num_cells
        self.accuracy = torchmetrics.classification.MulticlassAccuracy(
            num_classes=task.vocab_size, average="micro"
        )
        self.attention_bias: dict[int, torch.Tensor] = {}
        self.initial_optimizer_state: dict | None = None  # carried over from a curriculum stage
        self.recent_train_losses: deque[float] = deque(maxlen=50)
        self.last_train_loss = math.nan
        self.last_eval: dict = {}

    # --- training -----------------------------------------------------------------------------
    def scored(self, tokens: torch.Tensor, ctx: MixerContext | None = None):
        """tokens [B, L+1] -> (logits [B, N, V], targets [B, N]) on the scored rows (N of them)."""
        logits = self.model(tokens[:, :-1], ctx)
        return logits[:, self.loss_mask], tokens[:, 1:][:, self.loss_mask]

    def training_step(self, tokens: torch.Tensor, batch_idx: int) -> torch.Tensor:
        logits, targets = self.scored(tokens, MixerContext(bias=self.attention_bias))
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        value = loss.item()
        if not math.isfinite(value):
            raise Diverged(f"training loss became {value} at step {self.global_step}")
        self.last_train_loss = value
        self.recent_train_losses.append(value)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    # --- evaluation ---------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self.accuracy.reset()
        zeros = lambda: torch.zeros(self.num_cells, device=self.device, dtype=torch.float64)  # noqa: E731
        self._sums = {"loss": zeros(), "correct": zeros(), "p_correct": zeros(), "count": zeros()}

    def validation_step(self, tokens: torch.Tensor, batch_idx: int) -> None:
        logits, targets = self.scored(tokens, MixerContext(bias=self.attention_bias))
        loss = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # [B, N]
        predictions = logits.argmax(dim=-1)
        self.accuracy.update(predictions.flatten(), targets.flatten())
        cells = self.output_cell[self.loss_mask].expand_as(targets).flatten()
        per_token = {
            "loss": loss,
            "correct": (predictions == targets).double(),
            "p_correct": (-loss).exp(),
            "count": torch.ones_like(loss),
        }
        for key, value in per_token.items():
            self._sums[key].index_add_(0, cells, value.flatten().double())

    def on_validation_epoch_end(self) -> None:
        s = self._sums
        count = s["count"].sum()
        self.last_eval = {
            "step": self.global_step,
            "loss": float(s["loss"].sum() / count),
            "accuracy": float(self.accuracy.compute()),
            "p_correct": float(s["p_correct"].sum() / count),
            "cell_accuracy": (s["correct"] / s["count"]).float().cpu(),
            "cell_loss": (s["loss"] / s["count"]).float().cpu(),
        }
        e = self.last_eval
        self.log_dict({"eval/loss": e["loss"], "eval/accuracy": e["accuracy"], "eval/p_correct": e["p_correct"]})
        if self.num_cells <= 64:  # beyond that, per-cell scalars drown the dashboard
            self.log_dict({f"eval_cell_accuracy/{i}": float(a) for i, a in enumerate(e["cell_accuracy"])})
            self.log_dict({f"eval_cell_loss/{i}": float(v) for i, v in enumerate(e["cell_loss"])})

    # --- optimiser ----------------------------------------------------------------------------
    def configure_optimizers(self):
        o = self.optim
        # Parameters a mixer marks `_no_weight_decay` (SSM decay rates, step-size biases) are not decayed.
        decayed = [p for p in self.parameters() if not getattr(p, "_no_weight_decay", False)]
        kept = [p for p in self.parameters() if getattr(p, "_no_weight_decay", False)]
        groups = [{"params": decayed}] + ([{"params": kept, "weight_decay": 0.0}] if kept else [])
        optimizer = torch.optim.AdamW(groups, lr=o.lr, weight_decay=o.weight_decay, betas=o.betas)
        if self.initial_optimizer_state is not None:
            optimizer.load_state_dict(self.initial_optimizer_state)  # moments carry over; the lr does not
            for group in optimizer.param_groups:
                group["lr"] = group["initial_lr"] = o.lr
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(o, self.max_steps))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def lr_factor(optim: OptimConfig, max_steps: int):
    """step -> multiplier of the base lr: linear warmup, then constant, cosine or linear decay to 0."""

    def factor(step: int) -> float:
        if step < optim.warmup_steps:
            return (step + 1) / optim.warmup_steps
        if optim.schedule == "constant":
            return 1.0
        progress = min(1.0, (step - optim.warmup_steps) / max(1, max_steps - optim.warmup_steps))
        if optim.schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0 - progress

    return factor
