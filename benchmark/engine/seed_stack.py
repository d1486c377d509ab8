"""The batched model: K seeds of one architecture as stacked parameters, one vmapped forward, and
the group's data (seed k's own train stream in slice k of every batch)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any, Callable

import lightning as L
import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.utils.data import DataLoader, IterableDataset

from emergence_bench.callbacks.contract import EvalResult
from emergence_bench.config import OptimConfig
from emergence_bench.engine import training
from emergence_bench.engine.batching import vmapped
from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.module import EvalTally
from emergence_bench.engine.optim import adamw, is_decayed
from emergence_bench.engine.training import LossBuffer, scored_rows, train_losses
from emergence_bench.mixers.base import MixerContext
from emergence_bench.tasks.base import SyntheticTask, TrainStream


class SeedStack(L.LightningModule):
    """K SequenceModels of one architecture as stacked parameters and one vmapped forward.

    ``stacked[i]`` is parameter ``names[i]`` of every seed, [K, *shape]. Buffers equal in every seed
    (causal masks) stay unbatched in ``template``; those that differ are stacked too. The template's
    own parameters are never read (``functional_call`` substitutes the stack) and never trained.
    ``version`` counts backward passes and optimiser steps, so a seed's view knows when it is stale.

    Seeds that ended leave the forward and backward at the next training step (``compact``): those
    run over ``slots`` (the seeds still in, in order), gathered from the stack, so a step's cost falls
    with the live seeds (a batched step costs about K times one seed's at the ranking's size). The
    stack, AdamW and everything outside stay indexed by seed (0..K-1): the batch [K, ...], the losses
    [K] (an ended seed's read 0, its gradients are 0), ``live``, the biases. AdamW keeps all K slices
    because its fused CPU kernel rounds a tensor's tail elements differently from the rest, so the
    bits of a seed's update would depend on K. A seed's forward and backward do not depend on the other
    slices, so a compacted group trains each seed to the same bits as one that is not
    (tests/test_seed_parallel.py).

    The stack knows nothing of the seeds' callbacks, views or folders. The group gives it
    ``live`` (the seeds still training, [K] bools on the host: a step costs no device sync), ``bias``
    (their attention biases stacked, {layer: [K, ...]}) and two listeners: ``on_losses(steps, scored
    [n][K], full [n][K], at_step)`` for each read of the loss buffer, ``on_eval(results)`` (one
    EvalResult per seed, None for a seed out of the stack) for each eval.
    """

    rows: torch.Tensor  # a buffer: the scored rows [N]
    compacts = True  # ended seeds leave the forward and backward (False: computed to the group's end)

    def __init__(self, models: list[SequenceModel], task: SyntheticTask, optim: OptimConfig, max_steps: int,
                 train_on: str = "scored", log_every: int = 1, batch_order: str = "drawn") -> None:
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
        self.task, self.optim, self.max_steps = task, optim, max_steps
        self.train_on, self.log_every = train_on, log_every
        self.batch_order = batch_order  # trainer.batch_order: the step reverses each batch's sequences
        self.live = [True] * self.K
        self.slots = list(range(self.K))  # the seeds in the forward and backward, in order
        self.slot_index: torch.Tensor | None = None  # slots as an index tensor; None while it is all K
        self.bias: dict[int, torch.Tensor] = {}
        self.on_losses: Callable[[list[int], list, list, bool], None] | None = None
        self.on_eval: Callable[[list[EvalResult | None]], None] | None = None
        self.loss_buffer = LossBuffer(log_every, max_steps)  # per step not read yet: [2, K] (scored, every-row)
        self.trained_losses: torch.Tensor | None = None  # [K], what the latest step trains on
        self.version = 0
        self._unread: dict | None = None  # a resume point's unread losses, until the stack is on its device
        self._train = vmap(self._seed_losses, in_dims=(0, 0, 0))
        self._eval = vmap(self._seed_logits, in_dims=(0, None, 0))

    # --- one seed's computation (vmapped over the leading dim of the stack) -------------------
    def _held(self, per_seed: torch.Tensor) -> torch.Tensor:
        """[K, ...] (one slice per seed) -> [len(slots), ...], the slices of the seeds in the step."""
        return per_seed if self.slot_index is None else per_seed.index_select(0, self.slot_index)

    def _weights(self) -> dict[str, torch.Tensor]:
        """The weights of the seeds in the forward: {name: [len(slots), ...]}."""
        weights = {name: self._held(p) for name, p in zip(self.names, self.stacked)}
        weights.update({name: self._held(getattr(self, f"seed_buffer{i}")) for i, name in enumerate(self.buffer_names)})
        return weights

    def _seed_logits(self, weights: dict, tokens: torch.Tensor, bias: dict) -> torch.Tensor:
        """tokens [B, L+1] -> logits [B, L, V] of one seed's weights."""
        return functional_call(self.template, weights, (self.task.model_inputs(tokens), MixerContext(bias=bias)))

    def _seed_losses(self, weights: dict, tokens: torch.Tensor, bias: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (scored loss, every-row loss), scalars of one seed."""
        return train_losses(self._seed_logits(weights, tokens, bias), tokens[:, 1:], self.rows, self.train_on,
                            training.sequence_mask(self.task, tokens))

    def losses(self, tokens: torch.Tensor,
               bias: dict[int, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens [K, B, L+1] (seed k's batch in slice k), bias {layer: [K, ...]} (default: ``self.bias``)
        -> (scored losses [K], every-row losses [K]); a seed out of the stack reads 0."""
        bias = self.bias if bias is None else bias
        with vmapped(self.device):
            scored, full = self._train(self._weights(), self._held(tokens),
                                       {layer: self._held(b) for layer, b in bias.items()})
        if self.slot_index is None:
            return scored, full
        scored, full = (torch.zeros(self.K, dtype=t.dtype, device=t.device).index_copy(0, self.slot_index, t)
                        for t in (scored, full))
        return scored, full

    def logits(self, tokens: torch.Tensor, bias: dict[int, torch.Tensor] | None = None) -> torch.Tensor:
        """tokens [B, L+1] shared by every seed, bias as in ``losses`` -> logits [S, B, L, V] of the
        S seeds in the stack (``slots``; all K until one has ended)."""
        bias = self.bias if bias is None else bias
        with vmapped(self.device):
            return self._eval(self._weights(), tokens, {layer: self._held(b) for layer, b in bias.items()})

    def live_mask(self) -> torch.Tensor:
        """[K] bool on the device: the seeds still training."""
        return torch.tensor(self.live, device=self.device)

    def compact(self) -> None:
        """Take the seeds that ended out of the forward and backward (``slots``). Called between steps.
        Two seeds stay in at least (a live one and, if need be, an ended one): a vmapped dim of size 1
        takes other reduction paths (Mamba's step-size bias gradient), so a last seed alone would not
        keep its bits."""
        live = [k for k in self.slots if self.live[k]]
        ended = [k for k in self.slots if not self.live[k]]
        slots = sorted(live + ended[:max(0, 2 - len(live))])
        if slots != self.slots:  # the index is made once per change, not per parameter and step
            self.slots, self.slot_index = slots, torch.tensor(slots, device=self.device)

    # --- training -----------------------------------------------------------------------------
    def training_step(self, tokens: torch.Tensor, batch_idx: int) -> torch.Tensor | None:
        """tokens [K, B, L+1] -> the sum of the live seeds' losses (their gradients are independent)."""
        if self.compacts:
            self.compact()
        losses = training.step(self, tokens, batch_idx)  # [K]
        if not any(self.live):
            self.trainer.should_stop = True
            return None  # Lightning skips the update
        self.trained_losses = losses
        if all(self.live):
            return losses.sum()
        return torch.where(self.live_mask(), losses, torch.zeros_like(losses)).sum()

    def read_losses(self, at_step: bool = False) -> None:
        """Read the loss buffer back for every seed at once (one host sync) and hand the values to
        ``on_losses``, which checks each live seed's and ends those that diverged."""
        steps, scored_losses, full = self.loss_buffer.read()
        if steps and self.on_losses is not None:
            self.on_losses(steps, scored_losses, full, at_step)

    def on_train_epoch_end(self) -> None:
        self.read_losses()  # the tail of a group stopped between reads

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        with vmapped(self.device):
            loss.backward(*args, **kwargs)
        if not all(self.live):  # masked_fill, not a product: a diverged slot's 0 · NaN is NaN
            dead = ~self.live_mask()
            for p in self.stacked:
                if p.grad is not None:
                    p.grad.masked_fill_(dead.view(-1, *[1] * (p.grad.dim() - 1)), 0.0)
        self.version += 1

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer,
                                    gradient_clip_val: int | float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        if gradient_clip_val:
            clip_per_seed_([p.grad for p in self.stacked if p.grad is not None], gradient_clip_val)

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)
        self.version += 1

    def optimizer_zero_grad(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_zero_grad(*args, **kwargs)
        self.version += 1  # a seed's view shows no gradients now, as a run alone does

    def on_validation_model_zero_grad(self) -> None:
        super().on_validation_model_zero_grad()
        self.version += 1

    def configure_optimizers(self) -> Any:  # adamw's dict (Lightning's return type takes its TypedDicts)
        return adamw(list(self.stacked), self.decayed, self.optim, self.max_steps)

    # --- resume points (emergence_bench.engine.resume_point) -------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["seed_stack"] = {"live": list(self.live), "slots": list(self.slots),
                                    "unread": self.loss_buffer.state_dict()}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        saved = checkpoint["seed_stack"]
        self.version += 1  # the weights are the point's now: a view read before (at setup) is stale
        self.live[:] = saved["live"]  # in place: the seeds' views read this list
        self.slots = list(saved["slots"])
        self._unread = saved["unread"]

    def on_fit_start(self) -> None:
        if self._unread is not None:  # Lightning restores before it moves the module to its device
            self.loss_buffer.load_state_dict(self._unread, self.device)
            self._unread = None
            if len(self.slots) < self.K:
                self.slot_index = torch.tensor(self.slots, device=self.device)

    # --- evaluation ---------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._tally = EvalTally(self.task, len(self.slots), self.device)

    def validation_step(self, tokens: torch.Tensor, batch_idx: int) -> None:
        """tokens [B, L+1], the same for every seed."""
        self._tally.add(self.logits(tokens), tokens[:, 1:], training.sequence_mask(self.task, tokens))

    def on_validation_epoch_end(self) -> None:
        if self.on_eval is not None:
            results: list[EvalResult | None] = [None] * self.K  # a seed out of the stack has none
            for k, result in zip(self.slots, self._tally.results(self.global_step)):
                results[k] = result
            self.on_eval(results)

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

    def __init__(self, tasks: list[SyntheticTask]) -> None:
        super().__init__()
        self.tasks = tasks

    def train_dataloader(self) -> DataLoader:
        start = self.trainer.global_step if self.trainer is not None else 0
        return DataLoader(_StackedStream(self.tasks, start), batch_size=None)

    def val_dataloader(self) -> DataLoader:
        return self.tasks[0].val_dataloader()


class _StackedStream(IterableDataset):
    """Each seed's TrainStream, batch by batch, stacked: [K, B, L+1]."""

    def __init__(self, tasks: list[SyntheticTask], start: int) -> None:
        self.streams = [TrainStream(task, start) for task in tasks]

    def __iter__(self) -> Iterator[torch.Tensor]:
        for batches in zip(*self.streams):
            yield torch.stack(batches)
