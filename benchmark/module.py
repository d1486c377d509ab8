"""EmergenceModule: trains a SequenceModel on a task's scored tokens and measures it.

The pieces a single run and a seed-parallel group share live here as functions: ``train_losses`` (the training loss and the
full-sequence loss of one batch), ``EvalTally`` (one eval pass, per output cell, for one seed or K)
and the optimiser of ``emergence_bench.optim``. Seed-parallel's ensemble module calls the same ones.
"""

from __future__ import annotations

import math
from collections import deque

import lightning as L
import torch
import torch.nn.functional as F

from emergence_bench.callbacks.contract import EvalResult
from emergence_bench.config import TRAIN_ON, OptimConfig
from emergence_bench.model import SequenceModel
from emergence_bench.optim import adamw, is_decayed
from emergence_bench.mixers.base import MixerContext
from emergence_bench.tasks.base import SyntheticTask

FINAL_LOSS_WINDOW = 50  # final_train_loss is the mean over this many last steps
MAX_LOGGED_CELLS = 64  # beyond this many output cells, per-cell scalars drown the dashboard


class Diverged(RuntimeError):
    """The training loss became NaN or infinite."""


def scored_rows(task: SyntheticTask) -> torch.Tensor:
    """[N] the indices of the rows ``task.loss_mask`` scores. Indices, not the boolean mask: they vmap."""
    return task.loss_mask.nonzero().squeeze(1)


def scored(logits: torch.Tensor, targets: torch.Tensor, rows: torch.Tensor):
    """logits [..., L, V], targets [..., L], rows [N] (``scored_rows``) -> the scored rows of both,
    [..., N, V] and [..., N]."""
    return logits.index_select(-2, rows), targets.index_select(-1, rows)


def train_losses(logits: torch.Tensor, targets: torch.Tensor, rows: torch.Tensor, train_on: str = "scored"):
    """logits [B, L, V], targets [B, L], rows [N] (``scored_rows``) -> (the scored rows' loss,
    every row's loss), both scalars. Only the one ``train_on`` names keeps its autograd graph."""
    full = F.cross_entropy((logits if train_on == "all" else logits.detach()).flatten(0, 1), targets.flatten())
    logits, targets = scored(logits, targets, rows)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), full


def check_finite(scored: float, full: float, step: int) -> None:
    """Raise Diverged when a training loss is NaN or infinite."""
    for value in (scored, full):
        if not math.isfinite(value):
            raise Diverged(f"training loss became {value} at step {step}")


def is_read_step(batch_idx: int, read_every: int, max_steps: int) -> bool:
    """Whether the losses kept on the device are read back after step ``batch_idx``: every
    ``read_every`` steps and at the last step."""
    return (batch_idx + 1) % read_every == 0 or batch_idx + 1 == max_steps


def deliver_train_losses(callbacks, trainer, pl_module, steps: list[int], losses: list[float]) -> None:
    """Hand the train losses just read back to every callback that takes them
    (``on_train_losses``, the suite's one hook beyond Lightning's: callbacks/contract.py)."""
    for callback in callbacks:
        hook = getattr(callback, "on_train_losses", None)
        if callable(hook):
            hook(trainer, pl_module, steps, losses)


class EvalTally:
    """The sums of one eval pass for K seeds (K = 1 for a single run), per output cell.

    ``add(logits [K, B, L, V], targets [B, L])`` once per eval batch; ``results(step)`` gives one
    EvalResult per seed. Sums are float64, so the order of batches does not matter.
    """

    def __init__(self, task: SyntheticTask, seeds: int, device: torch.device):
        self.rows = scored_rows(task).to(device)  # [N]
        self.cells = task.output_cell.to(device).index_select(0, self.rows)  # [N] output cell of each
        zeros = lambda: torch.zeros(seeds, task.num_cells, dtype=torch.float64, device=device)  # noqa: E731
        self.sums = {"loss": zeros(), "correct": zeros(), "p_correct": zeros(), "count": zeros()}
        self.full_sequence = torch.zeros(seeds, dtype=torch.float64, device=device)  # every row's loss sum
        self.tokens = 0  # how many rows that sum covers

    def add(self, logits: torch.Tensor, targets: torch.Tensor) -> None:
        every_row = F.cross_entropy(logits.flatten(0, 2), targets.expand(logits.shape[:-1]).flatten(),
                                    reduction="none").view(logits.shape[:-1])  # [K, B, L]
        self.full_sequence += every_row.flatten(1).double().sum(1)
        self.tokens += targets.numel()
        (loss, _), (logits, targets) = scored(every_row.unsqueeze(-1), targets, self.rows), scored(logits, targets, self.rows)
        loss = loss.squeeze(-1)  # [K, B, N]
        correct = logits.argmax(-1) == targets
        per_token = {"loss": loss, "correct": correct, "p_correct": (-loss).exp(), "count": torch.ones_like(loss)}
        index = self.cells.expand(targets.shape[0], -1).flatten()  # [B·N]
        for key, value in per_token.items():
            self.sums[key].index_add_(1, index, value.flatten(1).double())

    def results(self, step: int) -> list[EvalResult]:
        s = self.sums
        count = s["count"].sum(1)  # [K]
        # Greedy accuracy as a float32 ratio of counts (what torchmetrics' micro accuracy computes).
        accuracy = s["correct"].sum(1).float() / count.float()
        loss, p_correct, full = s["loss"].sum(1) / count, s["p_correct"].sum(1) / count, self.full_sequence / self.tokens
        cell_accuracy, cell_loss = (s["correct"] / s["count"]).float().cpu(), (s["loss"] / s["count"]).float().cpu()
        return [EvalResult(step=step, loss=float(loss[k]), accuracy=float(accuracy[k]), p_correct=float(p_correct[k]),
                           full_sequence_loss=float(full[k]), cell_accuracy=cell_accuracy[k], cell_loss=cell_loss[k])
                for k in range(len(count))]


def eval_metrics(e: EvalResult) -> dict[str, float]:
    """The TensorBoard scalars of one eval."""
    metrics = {"eval/loss": e.loss, "eval/accuracy": e.accuracy, "eval/p_correct": e.p_correct,
               "eval/full_sequence_loss": e.full_sequence_loss}
    if len(e.cell_accuracy) <= MAX_LOGGED_CELLS:
        metrics.update({f"eval_cell_accuracy/{i}": float(a) for i, a in enumerate(e.cell_accuracy)})
        metrics.update({f"eval_cell_loss/{i}": float(v) for i, v in enumerate(e.cell_loss)})
    return metrics


class EmergenceModule(L.LightningModule):
    """Cross-entropy over ``task.loss_mask`` (or every row, ``train_on="all"``, as the paper trains);
    AdamW with warmup and a schedule. The model reads ``task.model_inputs(tokens)``.

    Logs ``train/loss`` (scored rows), ``train/full_sequence_loss`` (every row: the paper's scale)
    and, at each eval, ``eval/loss``, ``eval/accuracy`` (greedy, scored tokens), ``eval/p_correct``
    (mean probability of the correct token), ``eval/full_sequence_loss`` and per output cell
    accuracy and loss. It is the ``MeasuredModule`` callbacks read (callbacks/contract.py).

    ``attention_bias`` (layer -> logits bias) is applied to training and eval forwards; interventions
    set it. ``initial_optimizer_state`` carries AdamW's moments in from a curriculum stage.

    Each step's losses stay on the device and are read back every ``read_every`` steps (the run's
    ``log_every``), at the last step and at the end of training: one host sync per read, not per
    step. A read checks every step's loss (a NaN raises Diverged naming the step where it appeared,
    so a run stops at the read after it), logs the read step's losses, and hands all of them to the
    callbacks' ``on_train_losses``.
    """

    def __init__(self, model: SequenceModel, task: SyntheticTask, optim: OptimConfig, max_steps: int,
                 train_on: str = "scored", initial_optimizer_state: dict | None = None, read_every: int = 1):
        super().__init__()
        if train_on not in TRAIN_ON:
            raise ValueError(f"trainer.train_on must be one of {', '.join(TRAIN_ON)}, got {train_on!r}")
        self.model = model
        self.task = task
        self.optim = optim
        self.max_steps = max_steps
        self.train_on = train_on
        self.initial_optimizer_state = initial_optimizer_state
        self.register_buffer("rows", scored_rows(task), persistent=False)  # [N]
        self.attention_bias: dict[int, torch.Tensor] = {}
        self.recent_train_losses: deque[float] = deque(maxlen=FINAL_LOSS_WINDOW)
        self.recent_full_sequence_losses: deque[float] = deque(maxlen=FINAL_LOSS_WINDOW)
        self.last_train_loss = math.nan
        self.last_eval: EvalResult | None = None
        self.read_every = read_every
        self._pending: list[torch.Tensor] = []  # per step not read yet: [2] (scored, every-row loss)
        self._pending_from = 0  # the step of _pending[0]

    def all_rows(self, tokens: torch.Tensor, ctx: MixerContext | None = None):
        """tokens [B, L+1] -> (logits [B, L, V], targets [B, L]) on every query row."""
        return self.model(self.task.model_inputs(tokens), ctx), tokens[:, 1:]

    # --- training -----------------------------------------------------------------------------
    def training_step(self, tokens: torch.Tensor, batch_idx: int) -> torch.Tensor:
        logits, targets = self.all_rows(tokens, MixerContext(bias=self.attention_bias))
        scored_loss, full = train_losses(logits, targets, self.rows, self.train_on)
        if not self._pending:
            self._pending_from = batch_idx
        self._pending.append(torch.stack([scored_loss.detach(), full.detach()]))
        if is_read_step(batch_idx, self.read_every, self.max_steps):
            self.read_losses()
            # Lightning writes logs every log_every steps, the value of that step: the read step's.
            self.log("train/loss", self.last_train_loss)
            self.log("train/full_sequence_loss", self.recent_full_sequence_losses[-1])
        return full if self.train_on == "all" else scored_loss

    def read_losses(self) -> None:
        """Read back the losses kept on the device (one host sync), check them, hand them on."""
        if not self._pending:
            return
        values, first = torch.stack(self._pending).tolist(), self._pending_from
        self._pending = []
        for i, (value, full_value) in enumerate(values):
            check_finite(value, full_value, first + i)
            self.recent_train_losses.append(value)
            self.recent_full_sequence_losses.append(full_value)
        self.last_train_loss = values[-1][0]
        if self._trainer is not None:
            deliver_train_losses(self.trainer.callbacks, self.trainer, self,
                                 list(range(first, first + len(values))), [v for v, _ in values])

    def on_train_epoch_end(self) -> None:
        self.read_losses()  # the tail of a run stopped between reads, before the callbacks' on_train_end

    # --- evaluation ---------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._tally = EvalTally(self.task, 1, self.device)

    def validation_step(self, tokens: torch.Tensor, batch_idx: int) -> None:
        logits, targets = self.all_rows(tokens, MixerContext(bias=self.attention_bias))
        self._tally.add(logits.unsqueeze(0), targets)

    def on_validation_epoch_end(self) -> None:
        self.last_eval = self._tally.results(self.global_step)[0]
        self.log_dict(eval_metrics(self.last_eval))

    # --- optimiser ----------------------------------------------------------------------------
    def configure_optimizers(self):
        params = list(self.parameters())
        return adamw(params, [is_decayed(p) for p in params], self.optim, self.max_steps,
                     self.initial_optimizer_state)
