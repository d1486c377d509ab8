"""Seed-parallel training: K seeds of one config as one LightningModule, trained by the suite's Trainer.

``EnsembleModule`` holds the K seeds' parameters stacked along a new leading dim ([K, ...]); one
forward over all of them is ``torch.func.vmap`` of ``functional_call`` on a template SequenceModel, so
K small models become one model with K times larger ops. It is trained by ``build_trainer``, the
Trainer of a single run, so every Lightning hook fires as it does there. What stays per seed:

- initialisation: seed k's model is built exactly as ``emergence_bench.run.run`` builds it
  (``L.seed_everything(seed)``, then the task, then the model), then copied into slice k;
- data: slice k of train batch i is ``task_k.batch("train", i)`` (the seed's own stream); the eval
  set is shared by every seed, as it is equal in sequential runs;
- losses and evals: ``train_losses`` and ``EvalTally`` of ``emergence_bench.module``, per seed;
- gradient clipping: ``configure_gradient_clipping`` scales each seed's gradients by its own global
  norm (``clip_grad_norm_`` on slice k alone);
- optimiser state: one AdamW over the stacked tensors *is* K AdamWs, because AdamW is elementwise;
  the lr schedule is a function of the step, so it is shared;
- losses: kept on the device, [2, K] per step, and read back for every seed at once every
  ``log_every`` steps (one host sync), as a single run reads its own;
- NaN: a seed whose loss became non-finite ends as ``diverged`` at the read after it, naming the
  step, as a run alone does (until then its NaN stays in its own slice). A finished seed keeps its
  slot until the group ends: it is still computed, with zero gradients, and nothing of it reaches
  the others;
- callbacks and rows: each seed has its own callback instances and run folder, built as ``run()``
  builds them. The Trainer's one callback, ``SeedCallbacks``, fans every hook out to every live
  seed's callbacks with that seed's views: ``SeedView`` as ``pl_module`` (the MeasuredModule
  contract of callbacks/contract.py; its ``model`` holds seed k's weights and gradients as of now)
  and ``SeedTrainer`` as ``trainer`` (the shared Trainer with the seed's logger, folder and stop
  flag). A callback error ends its seed only, as ``failed``; a callback that sets ``should_stop``
  ends its seed alone, before the next step. Each seed writes ``out/<run_id>/result.json`` with the
  schema and run id of a sequential run, plus ``"seed_parallel": {"k": K, "group": [run ids]}``.

Hooks get seed k's slice of what they are passed (the batch, the loss); those about the optimiser
get the shared optimiser. Timings in each row are those of the shared step. ``trainer.compile``
does not apply: the batched step runs eagerly.

Mixers whose forward cannot be vmapped (a custom ``autograd.Function`` without vmap support, a GPU
kernel, randomness) are found by a trial forward and backward (``seed_parallel_supported``); their
seeds, and those of a config with a curriculum, run one after another through ``run()`` with
``"seed_parallel": {"k": 1, "fallback": reason}``.
"""

from __future__ import annotations

import copy
import math
import statistics
import time
from collections import deque
from pathlib import Path

import lightning as L
import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.utils.data import DataLoader, IterableDataset

from emergence_bench.callbacks.contract import EvalResult
from emergence_bench.config import OptimConfig, RunConfig, resolve
from emergence_bench.machine.devices import accelerator_device
from emergence_bench.machine.allocator import keep_freed_memory
from emergence_bench.execution.batching import vmapped
from emergence_bench.mixers.base import MixerContext
from emergence_bench.model import SequenceModel
from emergence_bench.module import (FINAL_LOSS_WINDOW, Diverged, EvalTally, check_finite, deliver_train_losses,
                                    eval_metrics, is_read_step, scored_rows, train_losses)
from emergence_bench.optim import adamw, is_decayed
from emergence_bench.results import RESULT_FILE, busy_row, write_json
from emergence_bench.run import RunBusy, RunFolder, apply_threads, build_model, build_task, check, failure, run
from emergence_bench.tasks.base import SyntheticTask, TrainStream, seeded_generator
from emergence_bench.trainer import build_trainer, quiet_lightning


# ----------------------------------------------------------------------------------------------
# The batched model.


class EnsembleModule(L.LightningModule):
    """K SequenceModels of one architecture as stacked parameters and one vmapped forward.

    ``stacked[i]`` is parameter ``names[i]`` of every seed, [K, *shape]. Buffers equal in every seed
    (causal masks) stay unbatched in ``template``; those that differ are stacked too. The template's
    own parameters are never read (``functional_call`` substitutes the stack) and never trained.
    ``version`` counts backward passes and optimiser steps, so a seed's view knows when it is stale.
    ``seeds`` (set by ``run_seed_parallel``) are the group's seeds, seed k in slot k.
    """

    def __init__(self, models: list[SequenceModel], task: SyntheticTask, optim: OptimConfig, max_steps: int,
                 train_on: str = "scored", log_every: int = 1):
        super().__init__()
        self.K = len(models)
        self.template = copy.deepcopy(models[0]).requires_grad_(False)
        own = [dict(m.named_parameters()) for m in models]
        self.names = list(own[0])
        self.stacked = nn.ParameterList([torch.stack([p[name].detach() for p in own]) for name in self.names])
        self.decayed = [is_decayed(own[0][name]) for name in self.names]
        buffers = [dict(m.named_buffers()) for m in models]
        self.buffer_names = [name for name in buffers[0]
                             if any(not torch.equal(b[name], buffers[0][name]) for b in buffers[1:])]
        for i, name in enumerate(self.buffer_names):
            self.register_buffer(f"seed_buffer{i}", torch.stack([b[name] for b in buffers]), persistent=False)
        self.register_buffer("rows", scored_rows(task), persistent=False)  # [N]
        self.task, self.optim, self.max_steps, self.train_on, self.log_every = task, optim, max_steps, train_on, log_every
        self.seeds: list[Seed] = []
        self._pending: list[torch.Tensor] = []  # per step not read yet: [2, K] (scored, every-row losses)
        self._pending_from = 0
        self.trained_losses: torch.Tensor | None = None  # [K], what the latest step trains on
        self.eval_for: list[Seed] | None = None  # an eval for these seeds only (SeedCallbacks sets it)
        self.version = 0
        self._train = vmap(self._seed_losses, in_dims=(0, 0, 0))
        self._eval = vmap(self._seed_logits, in_dims=(0, None, 0))

    # --- one seed's computation (vmapped over the leading dim of the stack) -------------------
    def _weights(self) -> dict[str, torch.Tensor]:
        weights = dict(zip(self.names, self.stacked))
        weights.update({name: getattr(self, f"seed_buffer{i}") for i, name in enumerate(self.buffer_names)})
        return weights

    def _seed_logits(self, weights: dict, tokens: torch.Tensor, bias: dict) -> torch.Tensor:
        """tokens [B, L+1] -> logits [B, L, V] of one seed's weights."""
        return functional_call(self.template, weights, (self.task.model_inputs(tokens), MixerContext(bias=bias)))

    def _seed_losses(self, weights: dict, tokens: torch.Tensor, bias: dict):
        """-> (scored loss, every-row loss), scalars of one seed."""
        return train_losses(self._seed_logits(weights, tokens, bias), tokens[:, 1:], self.rows, self.train_on)

    def losses(self, tokens: torch.Tensor, bias: dict[int, torch.Tensor]):
        """tokens [K, B, L+1] (seed k's batch in slice k), bias {layer: [K, ...]} -> (scored losses [K],
        every-row losses [K])."""
        with vmapped(self.device):
            return self._train(self._weights(), tokens, bias)

    def logits(self, tokens: torch.Tensor, bias: dict[int, torch.Tensor]) -> torch.Tensor:
        """tokens [B, L+1] shared by every seed -> logits [K, B, L, V]."""
        with vmapped(self.device):
            return self._eval(self._weights(), tokens, bias)

    def bias(self) -> dict[int, torch.Tensor]:
        """Each live seed's ``attention_bias``, stacked {layer: [K, ...]}."""
        return stack_bias([s.view.attention_bias if s.live else {} for s in self.seeds], self.device)

    def live(self) -> torch.Tensor:
        """[K] bool: the seeds still training."""
        return torch.tensor([s.live for s in self.seeds], device=self.device)

    def finished(self) -> list[bool]:
        """Per seed, whether it has ended: decided on the host, so a step costs no device sync."""
        return [not s.live for s in self.seeds]

    # --- training -----------------------------------------------------------------------------
    def training_step(self, tokens: torch.Tensor, batch_idx: int) -> torch.Tensor | None:
        """tokens [K, B, L+1] -> the sum of the live seeds' losses (their gradients are independent)."""
        scored, full = self.losses(tokens, self.bias())
        if not self._pending:
            self._pending_from = batch_idx
        self._pending.append(torch.stack([scored, full]).detach())  # [2, K]
        if is_read_step(batch_idx, self.log_every, self.max_steps):
            self.read_losses()
            for seed in [s for s in self.seeds if s.live]:
                seed.log({"train/loss": seed.view.last_train_loss,
                          "train/full_sequence_loss": seed.view.recent_full_sequence_losses[-1]}, batch_idx)
        finished = self.finished()
        if all(finished):
            self.trainer.should_stop = True
            return None  # Lightning skips the update
        self.trained_losses = full if self.train_on == "all" else scored
        if not any(finished):
            return self.trained_losses.sum()
        return torch.where(self.live(), self.trained_losses, torch.zeros_like(self.trained_losses)).sum()

    def read_losses(self) -> None:
        """EmergenceModule.read_losses for every live seed: one host sync for all of them. A seed
        whose loss became non-finite ends as ``diverged``; the others' losses go to their callbacks."""
        if not self._pending:
            return
        values, first = torch.stack(self._pending).tolist(), self._pending_from  # [n][2][K]
        self._pending = []
        steps = list(range(first, first + len(values)))
        for seed in [s for s in self.seeds if s.live]:
            k = seed.index
            losses, full_losses = [v[0][k] for v in values], [v[1][k] for v in values]
            finite = 0  # the steps before a non-finite loss count, as in a run alone
            try:
                for i, step in enumerate(steps):
                    check_finite(losses[i], full_losses[i], step)
                    finite = i + 1
            except Diverged as error:
                if finite:
                    seed.view.record_losses(losses[:finite], full_losses[:finite])
                seed.diverge(error)
                continue
            seed.view.record_losses(losses, full_losses)
            try:
                deliver_train_losses(seed.callbacks, seed.trainer, seed.view, steps, losses)
            except Exception as error:
                seed.fail(error)

    def on_train_epoch_end(self) -> None:
        self.read_losses()  # the tail of a group stopped between reads

    def backward(self, loss: torch.Tensor, *args, **kwargs) -> None:
        with vmapped(self.device):
            loss.backward(*args, **kwargs)
        if any(self.finished()):  # masked_fill, not a product: a diverged slot's 0 · NaN is NaN
            dead = ~self.live()
            for p in self.stacked:
                if p.grad is not None:
                    p.grad.masked_fill_(dead.view(-1, *[1] * (p.grad.dim() - 1)), 0.0)
        self.version += 1

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        if gradient_clip_val:
            clip_per_seed_([p.grad for p in self.stacked if p.grad is not None], gradient_clip_val)

    def optimizer_step(self, *args, **kwargs) -> None:
        super().optimizer_step(*args, **kwargs)
        self.version += 1

    def optimizer_zero_grad(self, *args, **kwargs) -> None:
        super().optimizer_zero_grad(*args, **kwargs)
        self.version += 1  # a seed's view shows no gradients now, as a run alone does

    def on_validation_model_zero_grad(self) -> None:
        super().on_validation_model_zero_grad()
        self.version += 1

    def configure_optimizers(self):
        return adamw(list(self.stacked), self.decayed, self.optim, self.max_steps)

    # --- evaluation ---------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._tally = EvalTally(self.task, self.K, self.device)

    def validation_step(self, tokens: torch.Tensor, batch_idx: int) -> None:
        """tokens [B, L+1], the same for every seed."""
        self._tally.add(self.logits(tokens, self.bias()), tokens[:, 1:])

    def on_validation_epoch_end(self) -> None:
        for seed, result in zip(self.seeds, self._tally.results(self.global_step)):
            if seed.live and (self.eval_for is None or seed in self.eval_for):
                seed.view.last_eval = result
                seed.log(eval_metrics(result), self.global_step - 1)  # the step Lightning logs a run's eval at

    # --- one seed's weights -------------------------------------------------------------------
    @torch.no_grad()
    def copy_into(self, k: int, model: SequenceModel) -> None:
        """Write seed k's current parameters (and gradients, when there are) into ``model``, in its
        own storage, so a saved state_dict holds one seed, not the whole stack."""
        own = dict(model.named_parameters())
        for name, stacked in zip(self.names, self.stacked):
            p = own[name]
            p.copy_(stacked[k])
            p.grad = None if stacked.grad is None else stacked.grad[k].clone()


def clip_per_seed_(grads: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` on each seed's slice: grads [K, ...] each, scaled in place
    by min(1, max_norm / (‖g_k‖ + 1e-6)) with ‖g_k‖ the 2-norm over all of seed k's gradients.
    Returns the norms before clipping [K]."""
    K = grads[0].shape[0]
    norms = torch.stack([torch.linalg.vector_norm(g.reshape(K, -1), dim=1) for g in grads])  # [P, K]
    total = torch.linalg.vector_norm(norms, dim=0)  # [K]
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale.view(-1, *[1] * (g.dim() - 1)))
    return total


def stack_bias(biases: list[dict[int, torch.Tensor]], device: torch.device) -> dict[int, torch.Tensor]:
    """Per-seed ``attention_bias`` dicts -> {layer: [K, ...]}; a seed without a layer's bias (a
    finished seed) gets zeros, so every seed takes the same code path."""
    layers = sorted({layer for bias in biases for layer in bias})
    stacked = {}
    for layer in layers:
        like = next(b[layer] for b in biases if layer in b)
        stacked[layer] = torch.stack([b.get(layer, torch.zeros_like(like)).to(like) for b in biases]).to(device)
    return stacked


class SeedBatches(L.LightningDataModule):
    """The group's data: train batch i is [K, B, L+1], slice k from seed k's own stream (from the
    Trainer's step on); the eval batches are the first seed's, [B, L+1] (every seed's are equal)."""

    def __init__(self, tasks: list[SyntheticTask]):
        super().__init__()
        self.tasks = tasks

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_StackedStream(self.tasks, self.trainer.global_step), batch_size=None)

    def val_dataloader(self) -> DataLoader:
        return self.tasks[0].val_dataloader()


class _StackedStream(IterableDataset):
    """Each seed's TrainStream, batch by batch, stacked: [K, B, L+1]."""

    def __init__(self, tasks: list[SyntheticTask], start: int):
        self.streams = [TrainStream(task, start) for task in tasks]

    def __iter__(self):
        for batches in zip(*self.streams):
            yield torch.stack(batches)


# ----------------------------------------------------------------------------------------------
# What one seed's callbacks see.


class SeedView:
    """Seed k's ``pl_module``: the MeasuredModule contract (callbacks/contract.py), with the seed's
    own task, losses, evals and ``attention_bias``. ``model`` is a SequenceModel holding slice k's
    weights (and gradients), refreshed whenever it is read after a backward or an update; read it in
    each hook rather than keep it from ``setup``. ``log``/``log_dict`` write to the seed's logger."""

    def __init__(self, ensemble: EnsembleModule, index: int, task: SyntheticTask, model: SequenceModel):
        self.ensemble, self.index, self.task = ensemble, index, task
        self._model, self._synced = model, None
        self.attention_bias: dict[int, torch.Tensor] = {}
        self.last_train_loss = math.nan
        self.recent_train_losses: deque[float] = deque(maxlen=FINAL_LOSS_WINDOW)
        self.recent_full_sequence_losses: deque[float] = deque(maxlen=FINAL_LOSS_WINDOW)
        self.last_eval: EvalResult | None = None
        self.trainer: SeedTrainer | None = None

    @property
    def model(self) -> SequenceModel:
        ensemble = self.ensemble
        now = (ensemble.version, ensemble.device)
        if self._synced != now:
            self._model.to(ensemble.device)
            ensemble.copy_into(self.index, self._model)
            self._synced = now
        self._model.train(ensemble.training)
        return self._model

    @property
    def device(self) -> torch.device:
        return self.ensemble.device

    @property
    def global_step(self) -> int:
        return self.ensemble.global_step

    @property
    def training(self) -> bool:
        return self.ensemble.training

    @property
    def logger(self):
        return self.trainer.logger

    @property
    def current_epoch(self) -> int:
        return self.ensemble.current_epoch

    def parameters(self, recurse: bool = True):
        return self.model.parameters(recurse)

    def named_parameters(self, *args, **kwargs):
        return self.model.named_parameters(*args, **kwargs)

    def record_losses(self, losses: list[float], full_sequence_losses: list[float]) -> None:
        """The losses of the steps just read back, in order."""
        self.recent_train_losses.extend(losses)
        self.recent_full_sequence_losses.extend(full_sequence_losses)
        self.last_train_loss = losses[-1]

    def log(self, name: str, value, **kwargs) -> None:
        self.log_dict({name: value})

    def log_dict(self, metrics: dict, **kwargs) -> None:
        self.ensemble.seeds[self.index].log(metrics, self.global_step)


class SeedTrainer:
    """Seed k's ``trainer``: the shared Trainer, but with the seed's own callbacks, logger, run
    folder, module view (``lightning_module``, ``model``), task (``datamodule``), logged metrics
    (``callback_metrics``, ``logged_metrics``) and ``should_stop`` (which ends this seed alone)."""

    def __init__(self, trainer: L.Trainer, seed: Seed):
        self._trainer = trainer
        self.should_stop = False
        self.callbacks, self.logger, self.loggers = seed.callbacks, seed.logger, [seed.logger]
        self.lightning_module = self.model = seed.view
        self.datamodule = seed.task
        self.default_root_dir = str(seed.folder.path)
        # What the seed logged, as Lightning keeps a run's (values are 0-dim tensors).
        self.callback_metrics: dict[str, torch.Tensor] = {}
        self.logged_metrics: dict[str, torch.Tensor] = {}

    @property
    def log_dir(self) -> str:
        return self.logger.log_dir

    def __getattr__(self, name: str):
        return getattr(self._trainer, name)


class Seed:
    """One seed of a group: its run folder, task, model, callbacks, logger and views."""

    def __init__(self, config: RunConfig, out: Path, note: dict, unfinished_only: bool = False):
        self.config, self.note = config, note
        self.folder = RunFolder(config, out, unfinished_only)
        self.index = -1
        self.live = False
        self.task = self.model = self.view = self.trainer = None
        self.callbacks: list = []
        self.logger = None

    def build(self, progress: bool) -> None:
        """Task, model and callbacks in ``run()``'s order, so the initial weights are the sequential run's."""
        L.seed_everything(self.config.seed, verbose=False)
        self.task = build_task(self.config)
        self.model = build_model(self.config, self.task)
        self.callbacks = self.folder.callbacks(self.task, progress)
        self.logger = self.folder.logger()

    def join(self, ensemble: EnsembleModule, index: int) -> None:
        self.index, self.live = index, True
        self.view = SeedView(ensemble, index, self.task, self.model)

    def attach(self, trainer: L.Trainer) -> None:
        self.trainer = SeedTrainer(trainer, self)
        self.view.trainer = self.trainer

    def hook(self, name: str, *args, **kwargs) -> None:
        for callback in self.callbacks:
            getattr(callback, name)(self.trainer, self.view, *args, **kwargs)

    def log(self, metrics: dict, step: int) -> None:
        self.logger.log_metrics({**metrics, "epoch": 0.0}, step)
        values = {name: torch.tensor(float(value)) for name, value in metrics.items()}
        self.trainer.callback_metrics.update(values)
        self.trainer.logged_metrics.update(values)

    def diverge(self, error: Diverged) -> None:
        """A NaN loss: the seed's ``on_exception`` hooks, then its row, as a run alone ends."""
        self.live = False
        try:
            self.hook("on_exception", error)
        except Exception:  # the row says diverged whatever a callback makes of it
            pass
        self.finish("diverged", str(error))

    def fail(self, error: Exception) -> None:
        """A callback raised: the seed's ``on_exception`` hooks, as Lightning calls them for a run
        alone, then its row."""
        self.live = False
        message = failure(error)
        try:
            self.hook("on_exception", error)
        except Exception:
            pass
        self.finish("failed", message)

    def stop(self) -> None:
        """A callback set ``should_stop``: the end-of-fit hooks now, then the row."""
        self.live = False
        try:
            for name in ("on_train_epoch_end", "on_train_end", "on_fit_end"):
                self.hook(name)
            self.hook("teardown", stage="fit")
        except Exception as error:
            self.finish("failed", failure(error))
            return
        self.finish("ok", None)

    def finish(self, status: str, error: str | None) -> dict:
        """Write the seed's row (once) and return it."""
        self.live = False
        if self.logger is not None and not self.folder.done:
            try:
                self.logger.finalize("success" if status == "ok" else "failed")
            except Exception:  # a logger that cannot flush must not lose the row
                pass
        # The training forwards ran on the ensemble's template: its mixers know the backend used.
        model = self.view.ensemble.template if self.view is not None else self.model
        return self.folder.finish(status, error, self.trainer, self.view, model, self.note)


# Every hook of Lightning's Callback; SeedCallbacks forwards each to every live seed.
HOOKS = [name for name, value in vars(L.Callback).items()
         if callable(value) and (name.startswith("on_") or name in ("setup", "teardown"))]


def _seed_args(name: str, seed: Seed, ensemble: EnsembleModule, args: tuple) -> tuple:
    """A hook's arguments as seed k sees them: its slice of the batch, its own loss."""
    k = seed.index
    if name == "on_train_batch_start":  # (batch [K, B, L+1], batch_idx)
        return (args[0][k], *args[1:])
    if name == "on_train_batch_end":  # (outputs, batch, batch_idx)
        outputs = None if args[0] is None else {"loss": ensemble.trained_losses[k].detach()}
        return (outputs, args[1][k], *args[2:])
    if name == "on_before_backward":  # (loss,)
        return (ensemble.trained_losses[k],)
    return args


class SeedCallbacks(L.Callback):
    """The group Trainer's one callback: every hook goes to each live seed's own callbacks with that
    seed's views and its slice of the arguments. An error ends that seed only, as ``failed``.

    A seed whose callbacks set ``should_stop`` ends as a run alone would: after the eval that
    Lightning runs when a stop is asked at the end of a step (the step's scheduled eval, or else one
    given to the asking seeds only), or after the eval in which it asked; its end-of-fit hooks fire
    before the next step. When every
    live seed has asked, the Trainer itself stops.
    """

    def __init__(self, ensemble: EnsembleModule):
        self.ensemble = ensemble

    def fan_out(self, name: str, trainer: L.Trainer, args: tuple, kwargs: dict) -> None:
        ensemble, seeds = self.ensemble, self.ensemble.seeds
        if name == "setup":
            for seed in seeds:
                seed.attach(trainer)
        if name == "on_train_batch_start" and any(s.live and s.trainer.should_stop for s in seeds):
            ensemble.read_losses()  # a stopping seed's last losses reach its callbacks, as at a run's end
            for seed in [s for s in seeds if s.live and s.trainer.should_stop]:
                seed.stop()
        receivers = [s for s in seeds if s.live]
        if name.startswith("on_validation") and ensemble.eval_for is not None:
            receivers = [s for s in receivers if s in ensemble.eval_for]
        for seed in receivers:
            try:
                seed.hook(name, *_seed_args(name, seed, ensemble, args), **kwargs)
            except Exception as error:
                seed.fail(error)
        live = [s for s in seeds if s.live]
        stopping = [s for s in live if s.trainer.should_stop]
        if (name == "on_train_batch_end" and stopping and len(stopping) < len(live)
                and trainer.global_step % trainer.val_check_batch != 0):
            # Lightning evaluates once more when a stop is asked between evals: for these seeds only.
            ensemble.eval_for = stopping
            trainer.should_stop = True
        elif name == "on_validation_end" and ensemble.eval_for is not None:
            ensemble.eval_for = None
            trainer.should_stop = False  # the others go on
        if not live or len(stopping) == len(live):
            trainer.should_stop = True


def _forward(name: str):
    def hook(self, trainer, pl_module, *args, **kwargs):
        self.fan_out(name, trainer, args, kwargs)

    hook.__name__ = name
    return hook


for _name in HOOKS:
    setattr(SeedCallbacks, _name, _forward(_name))


# ----------------------------------------------------------------------------------------------
# Public API.


BATCHING = ("always", "auto")
PAYS = 1.1  # auto batches a group when its probe measures it at least this much faster than one by one


def run_seed_parallel(configs: list[dict | RunConfig], out: str | Path, progress: bool = False,
                      batching: str = "always", unfinished_only: bool = False) -> list[dict]:
    """Train the seeds of ``configs`` (identical but for ``seed``) together; returns their rows.

    Each seed's row is written to ``out/<run_id>/result.json`` with the run id and schema of
    ``emergence_bench.run.run`` plus ``"seed_parallel"``: ``{"k": K, "group": [run ids]}`` when batched,
    ``{"k": 1, "fallback": reason}`` when the model cannot be vmapped and the seeds ran one by one.
    With ``batching="auto"`` a short probe (``batching_speedup``) first measures whether batching
    pays here and now; the group is batched only when it does (by ``PAYS``), and the measured
    speed-up is recorded either way (``"probe"``).
    A NaN loss ends only its seed (``diverged``); a callback error only its seed (``failed``); an
    error in the shared step fails every seed still training. Ctrl-C raises KeyboardInterrupt and
    leaves unfinished seeds without a row, so a resumed sweep reruns them. A seed another process
    holds (``RunBusy``, see emergence_bench.run.RunLock; with ``unfinished_only`` also one it has
    finished) is left to it: its row here is ``busy_row``'s, written nowhere.
    """
    if batching not in BATCHING:
        raise ValueError(f"seed-parallel batching must be one of {', '.join(BATCHING)}, got {batching!r}")
    configs = [check(c) for c in configs]
    if not configs:
        return []
    _check_group(configs)
    keep_freed_memory()  # K seeds' activations are large blocks: reused, not page-faulted afresh each step
    supported, reason = seed_parallel_supported(configs[0])
    probe = {}
    if supported and batching == "auto" and len(configs) > 1:
        speedup = batching_speedup(configs[0], len(configs))
        probe = {"probe": round(speedup, 3)}
        if speedup < PAYS:
            supported, reason = False, f"auto: batching {len(configs)} seeds measured {speedup:.2f}× one by one here"
    if not supported:
        rows = []
        for config in configs:
            try:
                row = run(config, out, progress=progress, unfinished_only=unfinished_only)
            except RunBusy as busy:
                rows.append(busy_row(config.run_id(), busy))
                continue
            row["seed_parallel"] = {"k": 1, "fallback": reason, **probe}
            write_json(Path(out) / row["run_id"] / RESULT_FILE, row)
            rows.append(row)
        return rows
    apply_threads(configs[0], seeds=len(configs))  # the thread policy, sized for K models
    quiet_lightning()
    note = {"seed_parallel": {"k": len(configs), "group": [c.run_id() for c in configs], **probe}}
    seeds, busy = [], []
    for config in configs:
        try:
            seeds.append(Seed(config, Path(out), note, unfinished_only))
        except RunBusy as error:
            busy.append(busy_row(config.run_id(), error))
    built = []
    for seed in seeds:
        try:
            seed.build(progress)
            built.append(seed)
        except Exception as error:
            seed.finish("failed", failure(error))
    if built:
        _train(built, configs[0], Path(out))
    return [s.folder.record for s in seeds] + busy


def _train(seeds: list[Seed], config: RunConfig, out: Path) -> None:
    """Fit the group with the suite's Trainer; an error in the shared step fails every live seed."""
    try:
        ensemble = EnsembleModule([s.model for s in seeds], seeds[0].task, config.optim, config.trainer.max_steps,
                                  config.trainer.train_on, config.trainer.log_every)
        for k, seed in enumerate(seeds):
            seed.join(ensemble, k)
        ensemble.seeds = seeds
        trainer = build_trainer(config, [SeedCallbacks(ensemble)], logger=False, root_dir=out)
        trainer.fit(ensemble, SeedBatches([s.task for s in seeds]))
    except SystemExit:  # Lightning turns Ctrl-C into exit(1) after a graceful shutdown
        raise KeyboardInterrupt("seed-parallel group interrupted") from None
    except Exception as error:
        for seed in seeds:
            if not seed.folder.done:
                seed.finish("failed", failure(error))
        return
    for seed in seeds:
        if not seed.folder.done:
            seed.finish("ok", None)


def _check_group(configs: list[RunConfig]) -> None:
    def without_seed(c: RunConfig) -> dict:
        d = c.to_dict()
        d.pop("seed")
        return d

    first = without_seed(configs[0])
    for c in configs[1:]:
        if without_seed(c) != first:
            raise ValueError("seed-parallel configs must be identical except for seed; "
                             f"seed {c.seed} differs from seed {configs[0].seed}")
    seeds = [c.seed for c in configs]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seed-parallel configs need distinct seeds, got {seeds}")


def seed_parallel_supported(config: dict | RunConfig) -> tuple[bool, str]:
    """Whether ``config``'s model trains as a vmapped ensemble here, and why not.

    A trial on two differently initialised copies of the model and two sequences: the batched
    loss, gradients and eval logits (with and without an attention bias, where a mixer takes one)
    must equal each copy's own, within float tolerance. Any error (an ``autograd.Function``
    without vmap support, a GPU kernel, randomness) or mismatch gives (False, reason).
    Leaves the global RNG state as it was.
    """
    config = resolve(config)
    if config.curriculum:  # each seed's stages would train alone first, their AdamW states apart
        return False, "a curriculum's stages are trained one seed at a time"
    device = accelerator_device(config.trainer.accelerator)
    if device is None:
        return False, f"trainer.accelerator={config.trainer.accelerator} but no CUDA device"
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            problem = _trial(config, device)
    except Exception as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return False, f"vmap trial failed: {type(error).__name__}: {message}"
    if problem:
        return False, problem
    return True, "vmap over seeds"


def _trial(config: RunConfig, device: torch.device) -> str | None:
    task = build_task(config)
    models = []
    for k in range(2):
        torch.manual_seed(config.seed + k)
        models.append(build_model(config, task).to(device))
    ensemble = EnsembleModule(models, task, config.optim, config.trainer.max_steps, config.trainer.train_on).to(device)
    tokens = torch.stack([task.generate(seeded_generator("seed_parallel.trial", k), 2) for k in range(2)]).to(device)
    biases = [{}]
    attention = [i for i, m in enumerate(models[0].mixers) if getattr(m, "exposes_attention", False)]
    if attention:  # the intervention's code path (explicit logits) too
        biases.append({i: torch.zeros(2, 1, 1, task.seq_len, task.seq_len, device=device) for i in attention})
    for bias in biases:
        scored, full = ensemble.losses(tokens, bias)
        trained = full if config.trainer.train_on == "all" else scored
        for p in ensemble.stacked:
            p.grad = None
        with vmapped(device):
            trained.sum().backward()
        with torch.no_grad():
            eval_logits = ensemble.logits(tokens[0], bias)  # [K, B, L, V]
        for k, model in enumerate(models):
            ctx = lambda: MixerContext(bias={i: b[k] for i, b in bias.items()})  # noqa: E731  (fresh per forward)
            model.train()
            own_scored, own_full = train_losses(model(task.model_inputs(tokens[k]), ctx()), tokens[k, :, 1:],
                                                ensemble.rows, config.trainer.train_on)
            loss = own_full if config.trainer.train_on == "all" else own_scored
            model.zero_grad(set_to_none=True)
            loss.backward()
            batched_loss, own_loss = float(trained[k].detach()), float(loss.detach())
            if not math.isclose(batched_loss, own_loss, rel_tol=1e-4, abs_tol=1e-5):
                return f"vmap trial: batched loss {batched_loss:.6g} != per-seed loss {own_loss:.6g}"
            for name, p, batched in zip(ensemble.names, model.parameters(), ensemble.stacked):
                if (p.grad is None) != (batched.grad is None):
                    return f"vmap trial: gradient of {name} present in one form only"
                if p.grad is not None:
                    scale = float(p.grad.abs().max()) + 1e-6
                    if float((batched.grad[k] - p.grad).abs().max()) > 1e-3 * scale:
                        return f"vmap trial: batched gradient of {name} differs from the per-seed one"
            model.eval()
            with torch.no_grad():
                own_logits = model(task.model_inputs(tokens[0]), ctx())
            if not torch.allclose(eval_logits[k], own_logits, rtol=1e-4, atol=1e-5):
                return "vmap trial: batched eval logits differ from the per-seed ones"
    return None


def batching_speedup(config: RunConfig, k: int, rounds: int = 3) -> float:
    """How much faster K seeds train batched than one after another, measured here and now: the
    median over ``rounds`` of (K × one seed's training step) / (one batched step of K seeds), each
    a whole step (data, forward, backward, clipping, AdamW) after a warm-up. Lightning's per-step
    overhead, which batching also saves, is left out, so the estimate errs towards one by one."""
    device = accelerator_device(config.trainer.accelerator) or torch.device("cpu")
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        task = build_task(config)
        models = [build_model(config, task).to(device) for _ in range(k)]
        t, o = config.trainer, config.optim
        ensemble = EnsembleModule(models, task, o, t.max_steps, t.train_on).to(device)
        ensemble.seeds = [_Slot() for _ in range(k)]
        batched_opt = ensemble.configure_optimizers()["optimizer"]
        single = models[0]
        params = list(single.parameters())
        single_opt = adamw(params, [is_decayed(p) for p in params], o, t.max_steps)["optimizer"]

        def batched(i: int) -> None:
            tokens = torch.stack([task.batch("train", i)] * k).to(device)
            scored, full = ensemble.losses(tokens, {})
            ensemble.backward((full if t.train_on == "all" else scored).sum())
            ensemble.configure_gradient_clipping(batched_opt, o.grad_clip)
            batched_opt.step()
            batched_opt.zero_grad(set_to_none=True)

        def one(i: int) -> None:
            tokens = task.batch("train", i).to(device)
            logits = single(task.model_inputs(tokens))
            scored, full = train_losses(logits, tokens[:, 1:], ensemble.rows, t.train_on)
            (full if t.train_on == "all" else scored).backward()
            if o.grad_clip:
                torch.nn.utils.clip_grad_norm_(params, o.grad_clip)
            single_opt.step()
            single_opt.zero_grad(set_to_none=True)

        def seconds(step, i: int) -> float:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            step(i)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return time.perf_counter() - start

        for i in range(2):  # warm-up: allocator, the batching rule, first-call costs
            batched(i), one(i)
        ratios = [k * seconds(one, i) / seconds(batched, i) for i in range(rounds)]
    return statistics.median(ratios)


class _Slot:
    """A probe's seed: always live."""

    live = True

