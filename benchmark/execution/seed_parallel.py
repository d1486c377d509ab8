"""Seed-parallel training: K seeds of one config trained in one process as one batched model.

The K models' parameters are stacked along a new leading dim ([K, ...]) and one forward over all of
them is ``torch.func.vmap`` of ``functional_call`` on a template SequenceModel, so K small models
become one model with K times larger ops. What stays per seed:

- initialisation: seed k's model is built exactly as ``emergence_bench.run.run`` builds it
  (``L.seed_everything(seed)``, then the task, then the model), then copied into slice k;
- data: slice k of each train batch is ``task_k.batch("train", step)`` (the seed's own stream);
  the eval set is shared by every seed, as in sequential runs;
- gradient clipping: each seed's gradients are scaled by its own global norm (Lightning's
  ``clip_grad_norm_`` applied to slice k alone);
- optimiser state: one AdamW over the stacked tensors *is* K AdamWs, because AdamW is elementwise;
  the lr schedule is a function of the step, so it is shared;
- callbacks and result rows: each seed has its own callback instances (built from the config as
  ``emergence_bench.run`` builds them), its own ``pl_module`` view (an EmergenceModule whose ``model`` is
  that seed's SequenceModel, refreshed from slice k whenever a callback reads it), its own
  Trainer stand-in with its TensorBoard logger, and it writes ``out/<run_id>/result.json`` with the
  schema and run id of a sequential run, plus ``"seed_parallel": {"k": K, "group": [run ids]}``.

The loop reproduces what ``run()``'s Lightning Trainer does, in its order: per step the
``on_train_batch_start`` hooks, the forward, a NaN check (a non-finite loss ends that seed as
``diverged`` before its update; the other seeds go on), backward, clipping, AdamW, the lr schedule,
``on_train_batch_end``; an eval after every ``eval_every``-th step (as Lightning's
``val_check_interval`` does: a final step that is not a multiple gets none). Hooks about gradients
and the optimiser (``on_before_backward``, ``on_before_optimizer_step``, ...) are not called: the
seeds share one backward and one optimiser step. Timings in each row are those of the shared step.
A finished (diverged or failed) seed keeps its slot until the group ends: it is still computed,
with zero gradients, and nothing of it reaches the others. ``trainer.compile`` does not apply here:
the batched step runs eagerly (equal to a compiled sequential run within float tolerance).

Mixers whose forward cannot be vmapped (a custom ``autograd.Function`` without vmap support, a
GPU kernel, randomness) are found by a trial forward and backward (``seed_parallel_supported``);
their seeds run one after another through ``emergence_bench.run.run`` with
``"seed_parallel": {"k": 1, "fallback": reason}`` in each row.

``throughput()`` measures seed-parallel against one seed at a time, for the ``speed`` command.
"""

from __future__ import annotations

import copy
import math
import shutil
import tempfile
import time
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
import yaml
from lightning.pytorch.loggers import TensorBoardLogger
from torch.func import functional_call, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from emergence_bench.config import OptimConfig, RunConfig, load_yaml, resolve
from emergence_bench.model import SequenceModel
from emergence_bench.module import Diverged, EmergenceModule, lr_factor
from emergence_bench.results import RESULT_FILE, SCHEMA_VERSION, versions, write_json, write_text
from emergence_bench.run import build_callbacks, build_model, build_task, check, describe_device, quiet_lightning, run
from emergence_bench.callbacks.checkpoints import CheckpointSchedule
from emergence_bench.callbacks.progress import ProgressLine
from emergence_bench.callbacks.recorder import Recorder
from emergence_bench.mixers.base import MixerContext
from emergence_bench.tasks.base import seeded_generator

# functorch warns when an op has no batching rule and it loops over the seeds instead.
_NO_BATCH_RULE = ".*There is a performance drop because we have not yet implemented the batching rule.*"


def _fold_flash_attention(info, in_dims, q, k, v, dropout_p=0.0, is_causal=False, attn_mask=None, scale=None):
    """Batching rule of CPU flash attention: the seeds are more sequences, so the vmapped dim is
    folded into the batch dim. q, k, v [K, B, H, L, E] (vmapped dim anywhere) -> one kernel call on
    [K·B, H, L, E] -> (out [K, B, H, L, E], logsumexp [K, B, H, L]), each seed's numbers exactly
    those of its own call. Autograd records the kernel on the folded tensors, so the backward is
    one kernel call too."""
    if dropout_p:
        raise RuntimeError("seed-parallel attention does not support dropout (its randomness is per call)")
    K = info.batch_size

    def fold(x, dim):
        x = x.movedim(dim, 0) if dim is not None else x.expand(K, *x.shape)
        return x.reshape(K * x.shape[1], *x.shape[2:])

    q, k, v = (fold(x, d) for x, d in zip((q, k, v), in_dims[:3]))
    if attn_mask is not None:
        dim = in_dims[5]
        mask = attn_mask.movedim(dim, 0) if dim is not None else attn_mask.expand(K, *attn_mask.shape)
        while mask.dim() < 5:  # [K, B|1, H|1, L, S]
            mask = mask.unsqueeze(1)
        attn_mask = mask.expand(K, q.shape[0] // K, *mask.shape[2:]).reshape(q.shape[0], *mask.shape[2:])
    out, logsumexp = _FLASH_CPU(q, k, v, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)
    return (out.unflatten(0, (K, -1)), logsumexp.unflatten(0, (K, -1))), (0, 0)


_FLASH_CPU = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
_flash_rule: str | None = None  # "registered", or why not (then SDPA's math backend is used)
_flash_library = None  # keeps the registration alive


def _register_flash_rule() -> str:
    """Give CPU flash attention a batching rule (once per process). torch has none: its fallback
    loops over the seeds and its backward zero-fills a full [K, ...] gradient per seed, which costs
    more than the rest of a small model. torch.library.register_vmap refuses this op (it has a
    keyword-only tensor), so this does what it does, with the arguments passed positionally.
    Needs private functorch helpers; where they are missing, SDPA's math backend is used instead."""
    global _flash_rule, _flash_library
    if _flash_rule is not None:
        return _flash_rule
    try:
        from torch._functorch.autograd_function import custom_function_call_vmap_helper
        from torch._functorch.pyfunctorch import retrieve_current_functorch_interpreter

        def batched(keyset, q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
            return custom_function_call_vmap_helper(retrieve_current_functorch_interpreter(), _fold_flash_attention,
                                                    _FLASH_CPU, q, k, v, dropout_p, is_causal, attn_mask, scale)

        library = torch.library.Library("aten", "IMPL")
        library.impl("_scaled_dot_product_flash_attention_for_cpu", batched, "FuncTorchBatched", with_keyset=True)
        _flash_library, _flash_rule = library, "registered"
    except Exception as error:  # another torch version: the math backend still batches
        _flash_rule = f"{type(error).__name__}: {error}"
    return _flash_rule


@contextmanager
def _vmapped(device: torch.device):
    """Context of every vmapped forward and backward: quiet about batching-rule fallbacks, and on
    CPU without the flash-attention rule above, SDPA's math backend (batched matmuls and a softmax;
    the same attention within float rounding) rather than the per-seed fallback loop."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NO_BATCH_RULE)
        if device.type == "cpu" and _register_flash_rule() != "registered":
            with sdpa_kernel([SDPBackend.MATH]):
                yield
        else:
            yield


def _device(config: RunConfig) -> torch.device | None:
    """The device Lightning would pick for ``trainer.accelerator``; None when it cannot run here."""
    accelerator = config.trainer.accelerator
    if accelerator == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu") if accelerator == "auto" else None


# ----------------------------------------------------------------------------------------------
# The batched model and its optimiser.


class Ensemble:
    """K SequenceModels of one architecture as stacked parameters and one vmapped forward.

    ``params[name]`` is a leaf [K, *shape] (slice k = seed k's parameter). Buffers equal in every
    seed (causal masks) stay unbatched in the template; ``buffers`` stacks those that differ
    ([K, *shape], read-only). ``version`` counts optimiser steps, so per-seed copies know when they
    are stale.
    """

    def __init__(self, models: list[SequenceModel], optim: OptimConfig, max_steps: int,
                 loss_mask: torch.Tensor, device: torch.device, model_inputs=None, train_on: str = "scored"):
        self.K = len(models)
        self.template = copy.deepcopy(models[0]).to(device)
        own = [dict(m.named_parameters()) for m in models]
        self.params = {name: torch.stack([p[name].detach() for p in own]).to(device).requires_grad_()
                       for name in own[0]}
        buffers = [dict(m.named_buffers()) for m in models]
        self.buffers = {name: torch.stack([b[name] for b in buffers]).to(device) for name in buffers[0]
                        if any(not torch.equal(b[name], buffers[0][name]) for b in buffers[1:])}
        # Mixers mark parameters that must not be decayed; the groups mirror EmergenceModule's.
        kept = {name for name, p in own[0].items() if getattr(p, "_no_weight_decay", False)}
        groups = [{"params": [p for n, p in self.params.items() if n not in kept]}]
        if kept:
            groups.append({"params": [p for n, p in self.params.items() if n in kept], "weight_decay": 0.0})
        self.optimizer = torch.optim.AdamW(groups, lr=optim.lr, weight_decay=optim.weight_decay, betas=optim.betas)
        self.base_lr, self.factor = optim.lr, lr_factor(optim, max_steps)
        self.grad_clip = optim.grad_clip
        self.scored = loss_mask.nonzero().squeeze(1).to(device)  # [N] indices: vmap has no boolean masking
        self.device = device
        self.model_inputs = model_inputs if model_inputs is not None else (lambda tokens: tokens[:, :-1])
        self.train_on = train_on
        self.last_full_sequence_losses: torch.Tensor | None = None  # [K], of the latest `losses`
        self.version = 0
        self._train = vmap(self._seed_loss, in_dims=(0, 0, 0))
        self._eval = vmap(self._seed_logits, in_dims=(0, None, 0))

    # --- one seed's computation (vmapped over the leading dim of params) ----------------------
    def _seed_logits(self, params: dict, tokens: torch.Tensor, bias: dict):
        """tokens [B, L+1] -> (logits [B, L, V], targets [B, L]) on every row, for one seed's params
        (and per-seed buffers)."""
        logits = functional_call(self.template, params, (self.model_inputs(tokens), MixerContext(bias=bias)))
        return logits, tokens[:, 1:]

    def _seed_loss(self, params: dict, tokens: torch.Tensor, bias: dict):
        """-> (scored loss, every-row loss), as EmergenceModule.training_step computes them."""
        logits, targets = self._seed_logits(params, tokens, bias)
        full = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        scored = F.cross_entropy(logits.index_select(1, self.scored).flatten(0, 1),
                                 targets.index_select(1, self.scored).flatten())
        return scored, full

    # --- training -----------------------------------------------------------------------------
    def losses(self, tokens: torch.Tensor, bias: dict[int, torch.Tensor]) -> torch.Tensor:
        """tokens [K, B, L+1] (seed k's batch in slice k), bias {layer: [K, ...]} -> the scored losses
        [K] (the every-row losses [K] are kept in ``last_full_sequence_losses``). ``update`` trains
        on the scored losses, or on the every-row ones with ``train_on="all"``."""
        self.template.train()
        with _vmapped(self.device):
            scored, full = self._train({**self.params, **self.buffers}, tokens, bias)
        self.last_full_sequence_losses = full
        return scored

    def trained(self, scored: torch.Tensor) -> torch.Tensor:
        """The losses [K] the update trains on: ``scored``, or the every-row ones (``train_on="all"``)."""
        return scored if self.train_on == "scored" else self.last_full_sequence_losses

    def update(self, losses: torch.Tensor, step: int, live: list[int] | None = None) -> None:
        """Backward of losses [K], per-seed clipping, AdamW at the lr of ``step``. Seeds not in
        ``live`` (default: all) get zero gradients, so a diverged seed's NaN stays in its slice."""
        dead = None
        losses = self.trained(losses)
        if live is not None and len(live) < self.K:
            dead = torch.ones(self.K, dtype=torch.bool, device=losses.device)
            dead[live] = False
            losses = torch.where(dead, torch.zeros_like(losses), losses)
        with _vmapped(self.device):
            losses.sum().backward()
        grads = [p.grad for p in self.params.values() if p.grad is not None]
        if dead is not None:
            for g in grads:  # masked_fill, not a product: 0 · NaN is NaN
                g.masked_fill_(dead.view(-1, *[1] * (g.dim() - 1)), 0.0)
        if self.grad_clip:
            clip_per_seed_(grads, self.grad_clip)
        lr = self.base_lr * self.factor(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.version += 1

    # --- evaluation ---------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, tokens: torch.Tensor, bias: dict[int, torch.Tensor]):
        """tokens [B, L+1] shared by all seeds -> (loss [K, B, N], predictions [K, B, N]) on the
        scored rows and the every-row loss [K, B, L]."""
        self.template.eval()
        with _vmapped(self.device):
            logits, targets = self._eval({**self.params, **self.buffers}, tokens, bias)  # [K, B, L, V], [K, B, L]
        every_row = F.cross_entropy(logits.flatten(0, 2), targets.flatten(), reduction="none").view(targets.shape)
        predictions = logits.index_select(2, self.scored).argmax(dim=-1)
        return every_row.index_select(2, self.scored), predictions, every_row

    @torch.no_grad()
    def copy_into(self, k: int, model: SequenceModel) -> None:
        """Write seed k's current parameters into ``model`` (its own storage, so a saved
        state_dict holds one seed, not the whole stack)."""
        for name, p in model.named_parameters():
            p.copy_(self.params[name][k])  # buffers are read-only: the seed's model has its own


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


# ----------------------------------------------------------------------------------------------
# What one seed's callbacks see.


class SeedModule(EmergenceModule):
    """One seed's ``pl_module``: an EmergenceModule (so callbacks find ``last_eval``,
    ``last_train_loss``, ``recent_train_losses``, ``attention_bias``, ``task``, ``device``) whose
    ``model`` is refreshed from the ensemble's slice k whenever it is read after an update.
    Callbacks should read ``pl_module.model`` in their hooks rather than keep it from ``setup``."""

    ensemble: Ensemble | None = None
    index = 0
    seed_trainer = None
    _synced = -1

    @property
    def model(self) -> SequenceModel:
        model = self._modules["model"]
        ensemble = self.ensemble
        if ensemble is not None and self._synced != ensemble.version:
            ensemble.copy_into(self.index, model)
            self._synced = ensemble.version
        return model

    @property
    def global_step(self) -> int:
        return self.seed_trainer.global_step if self.seed_trainer is not None else 0


class SeedTrainer:
    """The parts of a Trainer that callbacks read, for one seed of a group."""

    sanity_checking = testing = validating = should_stop = False
    training = True
    current_epoch = global_rank = local_rank = 0
    is_global_zero = True
    world_size = num_devices = 1

    def __init__(self, max_steps: int, callbacks: list, logger: TensorBoardLogger, run_dir: Path,
                 module: SeedModule):
        self.max_steps = self.estimated_stepping_batches = max_steps
        self.callbacks, self.logger, self.lightning_module = callbacks, logger, module
        self.default_root_dir = str(run_dir)
        self.global_step = 0

    @property
    def loggers(self) -> list:
        return [self.logger]

    @property
    def log_dir(self) -> str:
        return self.logger.log_dir


class Seed:
    """One seed of a group: its config, run dir, record, module view, trainer stand-in, callbacks."""

    def __init__(self, config: RunConfig, out: Path):
        self.config = config
        self.run_id = config.run_id()
        self.run_dir = Path(out) / self.run_id
        if self.run_dir.exists():  # leftovers of an interrupted attempt
            shutil.rmtree(self.run_dir)
        self.run_dir.mkdir(parents=True)
        write_text(self.run_dir / "config.yaml", yaml.safe_dump(config.to_dict(), sort_keys=False))
        self.record = {
            "schema_version": SCHEMA_VERSION, "run_id": self.run_id, "status": "ok", "error": None,
            "seed": config.seed, "config": config.to_dict(), "backend": None, "device": None,
            "versions": versions(), "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        self.recorder = Recorder(curve_every=config.trainer.log_every)
        self.module = self.trainer = self.task = None
        self.callbacks: list = []
        self.done = False

    def build(self, progress: bool) -> SequenceModel:
        """Task, model, module and callbacks, in ``run()``'s order, so the model's initial weights
        are those of the sequential run."""
        c = self.config
        L.seed_everything(c.seed, verbose=False)
        self.task = build_task(c)
        model = build_model(c, self.task)
        self.module = SeedModule(model, self.task, c.optim, c.trainer.max_steps, c.trainer.train_on)
        self.callbacks = build_callbacks(c, self.task) + [self.recorder]
        if c.checkpoints.every or c.checkpoints.log_spaced:
            self.callbacks.append(CheckpointSchedule(self.run_dir, c.trainer.max_steps, c.checkpoints.every,
                                                     c.checkpoints.log_spaced))
        if progress:
            self.callbacks.append(ProgressLine(prefix=f"[{self.run_id}] "))
        logger = TensorBoardLogger(save_dir=self.run_dir, name="", version="tensorboard", default_hp_metric=False)
        self.trainer = SeedTrainer(c.trainer.max_steps, self.callbacks, logger, self.run_dir, self.module)
        self.module.seed_trainer = self.trainer
        return model

    def hook(self, name: str, *args) -> None:
        for callback in self.callbacks:
            getattr(callback, name)(self.trainer, self.module, *args)

    def log(self, metrics: dict, step: int) -> None:
        self.trainer.logger.log_metrics({**metrics, "epoch": 0.0}, step)

    def finish(self, status: str = "ok", error: str | None = None, template: SequenceModel | None = None,
               extra: dict | None = None) -> dict:
        """Write the seed's result row (once) and return it."""
        if self.done:
            return self.record
        self.done = True
        if status != "ok":
            self.record.update(status=status, error=error)
        if self.module is not None:
            mixers = (template if template is not None else self.module.model).mixers
            self.record["backend"] = "+".join(sorted({getattr(m, "backend", "torch") for m in mixers}))
            self.record["device"] = describe_device(self.module.device)
        self.record.update(self.recorder.columns(self.trainer, self.module))
        self.record.update(extra or {})
        if self.trainer is not None:
            try:
                self.trainer.logger.finalize("success" if status == "ok" else "failed")
            except Exception:  # a logger that cannot flush must not lose the row
                pass
        write_json(self.run_dir / RESULT_FILE, self.record)
        return self.record


# ----------------------------------------------------------------------------------------------
# Public API.


def seed_parallel_supported(config: dict | RunConfig) -> tuple[bool, str]:
    """Whether ``config``'s model trains as a vmapped ensemble here, and why not.

    A trial on two differently initialised copies of the model and two sequences: the batched
    loss, gradients and eval logits (with and without an attention bias, where a mixer takes one)
    must equal each copy's own, within float tolerance. Any error (an ``autograd.Function``
    without vmap support, a GPU kernel, randomness) or mismatch gives (False, reason).
    Leaves the global RNG state as it was.
    """
    config = resolve(config)
    device = _device(config)
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
    ensemble = Ensemble(models, config.optim, config.trainer.max_steps, task.loss_mask, device,
                        task.model_inputs, config.trainer.train_on)
    tokens = torch.stack([task.generate(seeded_generator("seed_parallel.trial", k), 2) for k in range(2)]).to(device)
    mask = task.loss_mask.to(device)
    L = task.seq_len
    biases = [{}]
    attention = [i for i, m in enumerate(models[0].mixers) if getattr(m, "exposes_attention", False)]
    if attention:  # the intervention's code path (explicit logits) too
        biases.append({i: torch.zeros(2, 1, 1, L, L, device=device) for i in attention})
    for bias in biases:
        losses = ensemble.losses(tokens, bias)
        trained = ensemble.trained(losses)
        with _vmapped(device):
            trained.sum().backward()
        loss_eval, _, _ = ensemble.evaluate(tokens[0], bias)
        for k, model in enumerate(models):
            def ctx() -> MixerContext:  # seed k's slice of the bias; a fresh context per forward
                return MixerContext(bias={i: b[k] for i, b in bias.items()})

            model.train()
            logits = model(task.model_inputs(tokens[k]), ctx())
            if config.trainer.train_on == "scored":
                logits, targets = logits[:, mask], tokens[k, :, 1:][:, mask]
            else:
                targets = tokens[k, :, 1:]
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
            model.zero_grad(set_to_none=True)
            loss.backward()
            batched_loss, own_loss = float(trained[k].detach()), float(loss.detach())
            if not math.isclose(batched_loss, own_loss, rel_tol=1e-4, abs_tol=1e-5):
                return f"vmap trial: batched loss {batched_loss:.6g} != per-seed loss {own_loss:.6g}"
            for name, p in model.named_parameters():
                batched = ensemble.params[name].grad
                if (p.grad is None) != (batched is None):
                    return f"vmap trial: gradient of {name} present in one form only"
                if p.grad is not None:
                    scale = float(p.grad.abs().max()) + 1e-6
                    if float((batched[k] - p.grad).abs().max()) > 1e-3 * scale:
                        return f"vmap trial: batched gradient of {name} differs from the per-seed one"
            model.eval()
            with torch.no_grad():
                logits = model(task.model_inputs(tokens[0]), ctx())[:, mask]
                own = F.cross_entropy(logits.transpose(1, 2), tokens[0, :, 1:][:, mask], reduction="none")
            if not torch.allclose(loss_eval[k], own, rtol=1e-4, atol=1e-5):
                return "vmap trial: batched eval loss differs from the per-seed one"
        ensemble.optimizer.zero_grad(set_to_none=True)
    return None


def run_seed_parallel(configs: list[dict | RunConfig], out: str | Path, progress: bool = False) -> list[dict]:
    """Train the seeds of ``configs`` (identical but for ``seed``) together; returns their rows.

    Each seed's row is written to ``out/<run_id>/result.json`` with the run id and schema of
    ``emergence_bench.run.run`` plus ``"seed_parallel"``: ``{"k": K, "group": [run ids]}`` when batched,
    ``{"k": 1, "fallback": reason}`` when the model cannot be vmapped and the seeds ran one by one.
    A NaN loss ends only its seed (``diverged``); a callback error only its seed (``failed``); an
    error in the shared step fails every seed still training. Ctrl-C raises KeyboardInterrupt and
    leaves unfinished seeds without a row, so a resumed sweep reruns them.
    """
    configs = [check(c) for c in configs]
    if not configs:
        return []
    _check_group(configs)
    supported, reason = seed_parallel_supported(configs[0])
    if not supported:
        rows = []
        for config in configs:
            row = run(config, out, progress=progress)
            row["seed_parallel"] = {"k": 1, "fallback": reason}
            write_json(Path(out) / row["run_id"] / RESULT_FILE, row)
            rows.append(row)
        return rows
    quiet_lightning()
    seeds = [Seed(c, out) for c in configs]
    note = {"seed_parallel": {"k": len(seeds), "group": [s.run_id for s in seeds]}}
    _train_group(seeds, _device(configs[0]), progress, note)
    return [s.record for s in seeds]


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


def _failure(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}\n{traceback.format_exc()}"


def _train_group(seeds: list[Seed], device: torch.device, progress: bool, note: dict) -> None:
    """The training loop of ``run_seed_parallel`` (see the module docstring for its order)."""
    models = {}
    for k, seed in enumerate(seeds):
        try:
            models[k] = seed.build(progress)
        except Exception as error:
            seed.finish("failed", _failure(error), extra=note)
    live = [k for k in range(len(seeds)) if not seeds[k].done]
    if not live:
        return
    config = seeds[live[0]].config
    t = config.trainer
    ensemble = template = None
    try:
        # Every seed keeps a slot (a failed build takes a copy of a live model), so slot k is seed k.
        task = seeds[live[0]].task
        ensemble = Ensemble([models.get(k, models[live[0]]) for k in range(len(seeds))], config.optim,
                            t.max_steps, task.loss_mask, device, task.model_inputs, t.train_on)
        template = ensemble.template
        for k in live:
            module = seeds[k].module.to(device)
            module.ensemble, module.index = ensemble, k
        eval_set = [seeds[live[0]].task.batch("eval", i).to(device) for i in range(t.eval_batches)]
    except Exception as error:
        for k in live:
            seeds[k].finish("failed", _failure(error), template, note)
        return

    def each(hook_name: str) -> None:
        per_seed(lambda k, s: s.hook(hook_name))

    def per_seed(fn) -> None:
        """fn(k, seed) for every live seed; an error (in a callback) ends that seed only."""
        for k in list(live):
            try:
                fn(k, seeds[k])
            except Exception as error:
                seeds[k].finish("failed", _failure(error), template, note)
                live.remove(k)

    try:
        per_seed(lambda k, s: [cb.setup(s.trainer, s.module, stage="fit") for cb in s.callbacks])
        for name in ("on_fit_start", "on_train_start", "on_train_epoch_start"):
            each(name)
        for step in range(t.max_steps):
            if not live:
                break
            for k in live:
                seeds[k].trainer.global_step = step
            batches = {k: seeds[k].task.batch("train", step).to(device) for k in live}
            per_seed(lambda k, s: s.hook("on_train_batch_start", batches[k], step))
            if not live:
                break
            tokens = torch.stack([batches.get(k, batches[live[0]]) for k in range(len(seeds))])
            bias = stack_bias([seeds[k].module.attention_bias if k in live else {} for k in range(len(seeds))], device)
            losses = ensemble.losses(tokens, bias)
            values = losses.detach().tolist()
            full_values = ensemble.last_full_sequence_losses.detach().tolist()
            for k in list(live):
                bad = next((v for v in (values[k], full_values[k]) if not math.isfinite(v)), None)
                if bad is not None:  # run() raises Diverged here, before the update
                    error = Diverged(f"training loss became {bad} at step {step}")
                    live.remove(k)
                    try:
                        seeds[k].hook("on_exception", error)
                    except Exception:  # the row says diverged whatever a callback makes of it
                        pass
                    seeds[k].finish("diverged", str(error), template, note)
            if not live:
                break
            ensemble.update(losses, step, live)

            def after_step(k: int, s: Seed) -> None:
                value = values[k]
                s.module.last_train_loss = value
                s.module.recent_train_losses.append(value)
                s.module.recent_full_sequence_losses.append(full_values[k])
                s.trainer.global_step = step + 1
                s.hook("on_train_batch_end", {"loss": ensemble.trained(losses)[k].detach()}, batches[k], step)
                if (step + 1) % s.config.trainer.log_every == 0:
                    s.log({"train/loss": value, "train/full_sequence_loss": full_values[k]}, step)

            per_seed(after_step)
            if (step + 1) % t.eval_every == 0 and live:
                _evaluate(seeds, live, ensemble, eval_set, step, per_seed)
            for k in [k for k in live if seeds[k].trainer.should_stop]:  # a callback ended this seed
                live.remove(k)
                try:
                    _end(seeds[k], template, note)
                except Exception as error:
                    seeds[k].finish("failed", _failure(error), template, note)
        per_seed(lambda k, s: _end(s, template, note))
    except Exception as error:  # the shared step failed: every seed still training fails with it
        for k in live:
            seeds[k].finish("failed", _failure(error), template, note)


def _end(seed: Seed, template: SequenceModel, note: dict) -> None:
    """The end-of-fit hooks of one seed (at max_steps, or when a callback set should_stop), its row."""
    for name in ("on_train_epoch_end", "on_train_end", "on_fit_end"):
        seed.hook(name)
    for callback in seed.callbacks:
        callback.teardown(seed.trainer, seed.module, stage="fit")
    seed.finish("ok", None, template, note)


def _evaluate(seeds: list[Seed], live: list[int], ensemble: Ensemble, eval_set: list[torch.Tensor],
              step: int, per_seed) -> None:
    """One eval of every live seed on the shared eval set: EmergenceModule's metrics, per seed."""
    for k in live:
        seeds[k].module.eval()
        seeds[k].trainer.training, seeds[k].trainer.validating = False, True
    per_seed(lambda k, s: (s.hook("on_validation_start"), s.hook("on_validation_epoch_start")))
    bias = stack_bias([seeds[k].module.attention_bias if k in live else {} for k in range(len(seeds))],
                      ensemble.device)
    task = seeds[live[0]].task
    scored = ensemble.scored
    cells = task.output_cell.to(ensemble.device).index_select(0, scored)  # [N]
    K, C = ensemble.K, task.num_cells
    sums = {key: torch.zeros(K, C, dtype=torch.float64, device=ensemble.device)
            for key in ("loss", "correct", "p_correct", "count")}
    full_sequence = torch.zeros(K, 2, dtype=torch.float64, device=ensemble.device)  # (loss sum, rows)
    for i, tokens in enumerate(eval_set):
        per_seed(lambda k, s: s.hook("on_validation_batch_start", tokens, i, 0))
        loss, predictions, every_row = ensemble.evaluate(tokens, bias)  # [K, B, N], [K, B, N], [K, B, L]
        full_sequence[:, 0] += every_row.flatten(1).double().sum(1)
        full_sequence[:, 1] += every_row[0].numel()
        targets = tokens[:, 1:].index_select(1, scored)  # [B, N]
        per_token = {"loss": loss, "correct": (predictions == targets).double(), "p_correct": (-loss).exp(),
                     "count": torch.ones_like(loss)}
        index = cells.expand_as(targets).flatten()
        for key, value in per_token.items():
            sums[key].index_add_(1, index, value.flatten(1).double())
        per_seed(lambda k, s: s.hook("on_validation_batch_end", None, tokens, i, 0))

    def finish_eval(k: int, s: Seed) -> None:
        s.hook("on_validation_epoch_end")  # Lightning calls the callbacks' before the module's
        count = sums["count"][k].sum()
        # torchmetrics' micro accuracy is a float32 ratio of integer counts; so is this.
        accuracy = torch.tensor(float(sums["correct"][k].sum())).float() / torch.tensor(float(count)).float()
        s.module.last_eval = e = {
            "step": step + 1,
            "loss": float(sums["loss"][k].sum() / count),
            "accuracy": float(accuracy),
            "p_correct": float(sums["p_correct"][k].sum() / count),
            "full_sequence_loss": float(full_sequence[k, 0] / full_sequence[k, 1]),
            "cell_accuracy": (sums["correct"][k] / sums["count"][k]).float().cpu(),
            "cell_loss": (sums["loss"][k] / sums["count"][k]).float().cpu(),
        }
        metrics = {"eval/loss": e["loss"], "eval/accuracy": e["accuracy"], "eval/p_correct": e["p_correct"],
                   "eval/full_sequence_loss": e["full_sequence_loss"]}
        if s.module.num_cells <= 64:
            metrics.update({f"eval_cell_accuracy/{i}": float(a) for i, a in enumerate(e["cell_accuracy"])})
            metrics.update({f"eval_cell_loss/{i}": float(v) for i, v in enumerate(e["cell_loss"])})
        s.log(metrics, step)
        s.hook("on_validation_end")

    per_seed(finish_eval)
    for k in live:
        seeds[k].module.train()
        seeds[k].trainer.training, seeds[k].trainer.validating = True, False


# ----------------------------------------------------------------------------------------------
# Speed: what the `speed` command measures.

QUICK_PRESET = Path(__file__).parents[1] / "presets" / "quick.yaml"


def quick_config(steps: int = 100) -> dict:
    """The ``quick`` preset's base run (linear map S=8 s=3, d_model 64, 8 heads × 8, batch 128)
    with ``steps`` training steps and the preset's eval cadence."""
    base = copy.deepcopy(load_yaml(QUICK_PRESET)["base"])
    base.setdefault("trainer", {})["max_steps"] = steps
    return base


def throughput(config: dict | RunConfig | None = None, ks=(1, 4, 16), steps: int = 100, repeats: int = 1,
               out: str | Path | None = None) -> list[dict]:
    """Seed-parallel vs one seed at a time, side by side in this process: for each K, K seeds of
    ``config`` (default: the quick preset at ``steps`` steps) run one after another with
    ``emergence_bench.run.run``, then together with ``run_seed_parallel``; whole runs (setup, evals,
    result files), wall-clock, each mode the best of ``repeats`` alternating tries.

    Returns one row per K: {k, steps, sequential_s, parallel_s, speedup (sequential_s /
    parallel_s), seed_steps_per_s_sequential, seed_steps_per_s_parallel, mode ("vmap", or the
    fallback reason when the model cannot be batched)}.
    """
    base = resolve(config if config is not None else quick_config(steps)).to_dict()
    steps = base["trainer"]["max_steps"]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(out) if out is not None else Path(scratch)
        warm = {**base, "trainer": {**base["trainer"], "max_steps": 2}}
        run(warm, root / "warmup")  # first-call costs (allocator, TensorBoard, the vmap rule) off the clock
        run_seed_parallel([warm], root / "warmup")
        for K in ks:
            configs = [{**base, "seed": base["seed"] + i} for i in range(K)]
            sequential = parallel = math.inf
            for attempt in range(repeats):
                start = time.perf_counter()
                for c in configs:
                    run(c, root / f"k{K}" / "sequential")
                sequential = min(sequential, time.perf_counter() - start)
                start = time.perf_counter()
                note = run_seed_parallel(configs, root / f"k{K}" / "parallel")[0]["seed_parallel"]
                parallel = min(parallel, time.perf_counter() - start)
            rows.append({
                "k": K, "steps": steps, "sequential_s": sequential, "parallel_s": parallel,
                "speedup": sequential / parallel,
                "seed_steps_per_s_sequential": K * steps / sequential,
                "seed_steps_per_s_parallel": K * steps / parallel,
                "mode": "vmap" if "group" in note else note["fallback"],
            })
    return rows
