"""EmergenceModule: trains a SequenceModel on a task's scored tokens and measures it."""

from __future__ import annotations

import math
from collections import deque

import lightning as L
import torch
import torch.nn.functional as F
import torchmetrics

from emergence_bench.config import TRAIN_ON, OptimConfig
from emergence_bench.model import SequenceModel
from emergence_bench.mixers.base import MixerContext
from emergence_bench.tasks.base import SyntheticTask


FINAL_LOSS_WINDOW = 50  # final_train_loss is the mean over this many last steps


class Diverged(RuntimeError):
    """The training loss became NaN or infinite."""


class EmergenceModule(L.LightningModule):
    """Cross-entropy over ``task.loss_mask`` (or every row, ``train_on="all"``, as the paper trains);
    AdamW with warmup and a schedule. The model reads ``task.model_inputs(tokens)``.

    Logs ``train/loss`` (scored rows), ``train/full_sequence_loss`` (every row: the paper's scale)
    and, at each eval, ``eval/loss``, ``eval/accuracy`` (greedy, scored tokens), ``eval/p_correct``
    (mean probability of the correct token), ``eval/full_sequence_loss`` and per output cell
    accuracy. The last eval is kept in ``last_eval`` for callbacks: {loss, accuracy, p_correct,
    full_sequence_loss, cell_accuracy [C], cell_loss [C]}.

    ``attention_bias`` (layer -> logits bias) is applied to training and eval forwards; interventions
    set it.
    """

    def __init__(self, model: SequenceModel, task: SyntheticTask, optim: OptimConfig, max_steps: int,
                 train_on: str = "scored"):
        super().__init__()
        if train_on not in TRAIN_ON:
            raise ValueError(f"trainer.train_on must be one of {', '.join(TRAIN_ON)}, got {train_on!r}")
        self.model = model
        self.task = task
        self.optim = optim
        self.max_steps = max_steps
        self.train_on = train_on
        self.register_buffer("loss_mask", task.loss_mask.clone(), persistent=False)
        self.register_buffer("output_cell", task.output_cell.clone(), persistent=False)
        self.num_cells = task.num_cells
        self.accuracy = torchmetrics.classification.MulticlassAccuracy(
            num_classes=task.vocab_size, average="micro"
        )
        self.attention_bias: dict[int, torch.Tensor] = {}
        self.initial_optimizer_state: dict | None = None  # carried over from a curriculum stage
        self.recent_train_losses: deque[float] = deque(maxlen=FINAL_LOSS_WINDOW)
        self.recent_full_sequence_losses: deque[float] = deque(maxlen=FINAL_LOSS_WINDOW)
        self.last_train_loss = math.nan
        self.last_eval: dict = {}

    # --- training -----------------------------------------------------------------------------
    def all_rows(self, tokens: torch.Tensor, ctx: MixerContext | None = None):
        """tokens [B, L+1] -> (logits [B, L, V], targets [B, L]) on every query row."""
        return self.model(self.task.model_inputs(tokens), ctx), tokens[:, 1:]

    def scored(self, tokens: torch.Tensor, ctx: MixerContext | None = None):
        """tokens [B, L+1] -> (logits [B, N, V], targets [B, N]) on the scored rows (N of them)."""
        logits, targets = self.all_rows(tokens, ctx)
        return logits[:, self.loss_mask], targets[:, self.loss_mask]

    def training_step(self, tokens: torch.Tensor, batch_idx: int) -> torch.Tensor:
        logits, targets = self.all_rows(tokens, MixerContext(bias=self.attention_bias))
        scored = F.cross_entropy(logits[:, self.loss_mask].flatten(0, 1), targets[:, self.loss_mask].flatten())
        if self.train_on == "all":
            loss = full = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        else:  # the paper's scale, measured on the side
            loss, full = scored, F.cross_entropy(logits.detach().flatten(0, 1), targets.flatten())
        value, full_value = (float(v) for v in torch.stack([scored.detach(), full.detach()]).tolist())
        if not math.isfinite(value) or not math.isfinite(full_value):
            raise Diverged(f"training loss became {value if not math.isfinite(value) else full_value} "
                           f"at step {self.global_step}")
        self.last_train_loss = value
        self.recent_train_losses.append(value)
        self.recent_full_sequence_losses.append(full_value)
        self.log("train/loss", scored, prog_bar=True)
        self.log("train/full_sequence_loss", full)
        return loss

    # --- evaluation ---------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self.accuracy.reset()
        zeros = lambda: torch.zeros(self.num_cells, device=self.device, dtype=torch.float64)  # noqa: E731
        self._sums = {"loss": zeros(), "correct": zeros(), "p_correct": zeros(), "count": zeros()}
        self._full_sequence = torch.zeros(2, device=self.device, dtype=torch.float64)  # (loss sum, rows)

    def validation_step(self, tokens: torch.Tensor, batch_idx: int) -> None:
        all_logits, all_targets = self.all_rows(tokens, MixerContext(bias=self.attention_bias))
        every_row = F.cross_entropy(all_logits.transpose(1, 2), all_targets, reduction="none")  # [B, L]
        self._full_sequence += torch.stack([every_row.sum().double(), every_row.new_tensor(every_row.numel()).double()])
        logits, targets = all_logits[:, self.loss_mask], all_targets[:, self.loss_mask]
        loss = every_row[:, self.loss_mask]  # [B, N]
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
            "full_sequence_loss": float(self._full_sequence[0] / self._full_sequence[1]),
            "cell_accuracy": (s["correct"] / s["count"]).float().cpu(),
            "cell_loss": (s["loss"] / s["count"]).float().cpu(),
        }
        e = self.last_eval
        self.log_dict({"eval/loss": e["loss"], "eval/accuracy": e["accuracy"], "eval/p_correct": e["p_correct"],
                       "eval/full_sequence_loss": e["full_sequence_loss"]})
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
