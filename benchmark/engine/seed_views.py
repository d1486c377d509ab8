"""What one seed of a group sees: its own ``pl_module`` (``SeedView``) and ``trainer``
(``SeedTrainer``), its folder, callbacks and logger (``Seed``), and the group Trainer's one callback
that fans every hook out to the live seeds (``SeedCallbacks``), which also gives a resume point each
seed's state. Over 400 lines, on purpose: the three change together (a hook the fan-out passes is one
the views answer; a point keeps the state of all of them), and the fan-out in a module of its own
would add a floor to the house (tests/test_layout.py).

Lightning offers no supported way to do two things here, so they are done by hand:

- A callback is always called with the one Trainer of the fit (``Callback`` hooks take
  ``(trainer, pl_module, ...)``, and neither a Strategy, which places, reduces and backpropagates, nor
  a loop hook can choose the ``trainer`` a callback receives; custom loops left the public API in
  Lightning 2.0). Each seed's callbacks need the shared Trainer's state (``global_step``, the
  checkpoint and eval cadence, ...) but their own logger, folder, logged metrics and
  ``should_stop``. ``SeedTrainer`` overrides those and hands every other attribute through
  ``__getattr__``: listing them would copy Lightning's Trainer API here, and fall behind it.
- ``Callback`` has no catch-all hook: Lightning calls each named hook. ``SeedCallbacks`` defines one
  forwarder per hook of ``L.Callback`` (``HOOKS``, read from the installed Lightning), so a hook
  Lightning adds reaches the seeds too.

What a Lightning Callback hook can do is done by one: ``SeedCallbacks`` is an ``L.Callback``. The
stack's reads of its loss buffer and its evals reach the seeds through listeners
(``losses_read``, ``evaluated``), not hooks: a loss read happens inside ``training_step``, and
Lightning calls the callbacks' ``on_validation_epoch_end`` before the module's, which computes the
results.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import Logger

from emergence_bench.callbacks.contract import EvalResult
from emergence_bench.callbacks.emergence import Emergence
from emergence_bench.engine.group_stop import GroupStop, Outcome
from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.module import eval_metrics
from emergence_bench.engine.run import RunPlan, build_callbacks, build_model
from emergence_bench.engine.run_folder import EndedFolder, RunFolder, failure
from emergence_bench.engine.run_losses import RunLosses
from emergence_bench.engine.seed_stack import SeedStack, stack_bias
from emergence_bench.engine.training import Diverged
from emergence_bench.results.row import ResultRow, emergence_step, step_budget
from emergence_bench.tasks.base import SyntheticTask


class SeedView(RunLosses):
    """Seed k's ``pl_module``: the MeasuredModule contract (callbacks/contract.py), with the seed's
    own task, losses and evals (``RunLosses``, as a run alone has them) and ``attention_bias``.
    ``model`` is a SequenceModel holding slice k's weights (and gradients), refreshed whenever it is
    read after a backward or an update; read it in each hook rather than keep it from ``setup``.
    ``log``/``log_dict`` write to the seed's logger."""

    def __init__(self, seed: Seed, stack: SeedStack, task: SyntheticTask, model: SequenceModel) -> None:
        self.seed, self.stack, self.index, self.task = seed, stack, seed.index, task
        self._model = model
        self._synced: tuple[int, torch.device] | None = None
        self.attention_bias: dict[int, torch.Tensor] = {}
        self.start_losses()
        self.trainer: SeedTrainer | None = None

    @property
    def model(self) -> SequenceModel:
        stack = self.stack
        now = (stack.version, stack.device)
        if self._synced != now:
            self._model.to(stack.device)
            stack.copy_into(self.index, self._model)
            self._synced = now
        self._model.train(stack.training)
        return self._model

    @property
    def device(self) -> torch.device:
        return self.stack.device

    @property
    def global_step(self) -> int:
        return self.stack.global_step

    @property
    def training(self) -> bool:
        return self.stack.training

    @property
    def logger(self) -> Logger | None:
        return self.trainer.logger if self.trainer is not None else None

    @property
    def current_epoch(self) -> int:
        return self.stack.current_epoch

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]:
        return self.model.parameters(recurse)

    def named_parameters(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, torch.nn.Parameter]]:
        return self.model.named_parameters(*args, **kwargs)

    def log(self, name: str, value: Any, **kwargs: Any) -> None:
        self.log_dict({name: value})

    def log_dict(self, metrics: dict, **kwargs: Any) -> None:
        self.seed.log(metrics, self.global_step)


class SeedTrainer:
    """Seed k's ``trainer``: the shared Trainer, but with the seed's own callbacks, logger, run
    folder, module view (``lightning_module``, ``model``), task (``datamodule``), logged metrics
    (``callback_metrics``, ``logged_metrics``) and ``should_stop`` (which ends this seed alone)."""

    def __init__(self, trainer: L.Trainer, seed: Seed) -> None:
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
    def log_dir(self) -> str | None:
        return self.logger.log_dir if self.logger is not None else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._trainer, name)


class Seed:
    """One seed of a group: its run folder, task, model, callbacks, logger and views. Its folder is
    made by ``folder.start`` (see RunFolder), or, for a seed that ended before the resume point its
    group goes on from, is that run's row (``ended``: an EndedFolder)."""

    def __init__(self, planned: RunPlan, out: Path, note: dict, unfinished_only: bool = False,
                 ended: ResultRow | None = None) -> None:
        self.planned, self.config, self.note = planned, planned.config, note
        self.folder = (RunFolder(self.config, out, unfinished_only, start=False) if ended is None
                       else EndedFolder(self.config, out, ended))
        self.index = -1
        self.task: SyntheticTask | None = None  # these four from build on
        self.model: SequenceModel | None = None
        self.callbacks: list[L.Callback] = []
        self.logger: Logger | None = None
        self.view: SeedView | None = None  # from join on
        self.trainer: SeedTrainer | None = None  # from attach (the Trainer's setup) on

    def build(self, progress: bool) -> None:
        """Task, model and callbacks as ``run()`` makes them (the plan's task, then the model under the
        seed), so the initial weights are the sequential run's."""
        L.seed_everything(self.config.seed, verbose=False)
        self.task = self.planned.task
        self.model = build_model(self.config, self.task)  # an ended seed's too: its slot's buffers
        if not isinstance(self.folder, EndedFolder):
            self.callbacks = self.folder.callbacks(build_callbacks(self.config, self.task), progress)
            self.logger = self.folder.logger()

    @property
    def live(self) -> bool:
        """Whether the seed is still training: its slot of the stack's live mask."""
        return self.view is not None and self.view.stack.live[self.index]

    @live.setter
    def live(self, value: bool) -> None:
        if self.view is not None:
            self.view.stack.live[self.index] = value

    def join(self, stack: SeedStack, index: int) -> None:
        """Take slot ``index`` of ``stack``."""
        self.index = index
        self.view = SeedView(self, stack, *self.built)
        self.live = True

    @property
    def built(self) -> tuple[SyntheticTask, SequenceModel]:
        """The task and model ``build`` made."""
        if self.task is None or self.model is None:
            raise RuntimeError(f"seed {self.config.seed} was not built")
        return self.task, self.model

    @property
    def joined(self) -> SeedView:
        """The seed's module view (every live seed has one: it joined a stack)."""
        if self.view is None:
            raise RuntimeError(f"seed {self.config.seed} has not joined a stack")
        return self.view

    @property
    def attached(self) -> SeedTrainer:
        """The seed's trainer view (every live seed has one once the Trainer set up)."""
        if self.trainer is None:
            raise RuntimeError(f"seed {self.config.seed} has no trainer before the Trainer's setup")
        return self.trainer

    def attach(self, trainer: L.Trainer) -> None:
        self.trainer = SeedTrainer(trainer, self)
        self.joined.trainer = self.trainer

    def hook(self, name: str, *args: Any, **kwargs: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, name)(self.trainer, self.view, *args, **kwargs)

    def log(self, metrics: dict, step: int) -> None:
        if self.logger is not None:
            self.logger.log_metrics({**metrics, "epoch": 0.0}, step)
        values = {name: torch.tensor(float(value)) for name, value in metrics.items()}
        self.attached.callback_metrics.update(values)
        self.attached.logged_metrics.update(values)

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

    def state_dict(self) -> dict:
        """What a live seed needs to go on from a resume point as if it had never stopped: each
        callback's state (by its ``state_key``), its losses and last eval, what it logged, its note."""
        if not self.live:
            return {}
        trainer = self.attached
        return {"callbacks": {c.state_key: c.state_dict() for c in self.callbacks},
                "losses": self.joined.losses_state(), "note": self.note,
                "metrics": [dict(trainer.callback_metrics), dict(trainer.logged_metrics)]}

    def load_state_dict(self, state: dict) -> None:
        if not state:  # ended before the point
            return
        for callback in self.callbacks:
            if callback.state_key in state["callbacks"]:
                callback.load_state_dict(state["callbacks"][callback.state_key])
        self.joined.load_losses_state(state["losses"])
        self.note = state["note"]
        for mine, saved in zip((self.attached.callback_metrics, self.attached.logged_metrics), state["metrics"]):
            mine.update(saved)

    def finish(self, status: str, error: str | None) -> ResultRow:
        """Write the seed's row (once) and return it."""
        self.live = False
        if self.logger is not None and not self.folder.done:
            try:
                self.logger.finalize("success" if status == "ok" else "failed")
            except Exception:  # a logger that cannot flush must not lose the row
                pass
        # The training forwards ran on the stack's template: its mixers know the backend used.
        model = self.view.stack.template if self.view is not None else self.model
        return self.folder.finish(status, error, self.trainer, self.view, model, self.note)


def outcome(seed: Seed) -> Outcome:
    """Where ``seed`` stands: its row once it has one, else its Emergence callback's record."""
    if seed.folder.done:
        record = seed.folder.record
        if record["status"] == "failed":
            return "failed", None
        step = emergence_step(record)
        return ("emerged", step) if step is not None else ("ended", step_budget(record))
    step = next((c.emerged_at for c in seed.callbacks if isinstance(c, Emergence)), None)
    return ("emerged", step) if step is not None else ("live", None)


# Every hook of Lightning's Callback; SeedCallbacks forwards each to every live seed.
HOOKS = [name for name, value in vars(L.Callback).items()
         if callable(value) and (name.startswith("on_") or name in ("setup", "teardown"))]


def _trained_losses(stack: SeedStack) -> torch.Tensor:
    """[K]: the losses of the step that just ran (the hooks that read them follow a step)."""
    if stack.trained_losses is None:
        raise RuntimeError("a training step's hook before any training step")
    return stack.trained_losses


def _seed_args(name: str, seed: Seed, stack: SeedStack, args: tuple) -> tuple:
    """A hook's arguments as seed k sees them: its slice of the batch, its own loss."""
    k = seed.index
    if name == "on_train_batch_start":  # (batch [K, B, L+1], batch_idx)
        return (args[0][k], *args[1:])
    if name == "on_train_batch_end":  # (outputs, batch, batch_idx)
        outputs = None if args[0] is None else {"loss": _trained_losses(stack)[k].detach()}
        return (outputs, args[1][k], *args[2:])
    if name == "on_before_backward":  # (loss,)
        return (_trained_losses(stack)[k],)
    return args


class SeedCallbacks(L.Callback):
    """The group Trainer's one callback: every hook goes to each live seed's own callbacks with that
    seed's views and its slice of the arguments. An error ends that seed only, as ``failed``.

    A seed whose callbacks set ``should_stop`` ends as a run alone would: after the eval that
    Lightning runs when a stop is asked at the end of a step (the step's scheduled eval, or else one
    given to the asking seeds only), or after the eval in which it asked; its end-of-fit hooks fire
    before the next step. When every live seed has asked, the Trainer itself stops. ``stop_group``
    (optional, a ``GroupStop``) is asked after every eval of the whole group; a section it returns
    stops every live seed and goes into their rows.
    """

    def __init__(self, stack: SeedStack, seeds: list[Seed], stop_group: GroupStop | None = None) -> None:
        self.stack, self.seeds = stack, seeds  # seed k in slot k
        self.eval_for: list[Seed] | None = None  # an eval for these seeds only
        self.stop_group = stop_group
        stack.on_losses, stack.on_eval = self.losses_read, self.evaluated

    def state_dict(self) -> dict:
        """Every seed's state for a resume point (``Seed.state_dict``), slot by slot."""
        return {"seeds": [seed.state_dict() for seed in self.seeds]}

    def load_state_dict(self, state: dict) -> None:
        for seed, saved in zip(self.seeds, state["seeds"]):
            seed.load_state_dict(saved)

    def ready(self) -> bool:
        """Whether no seed is ending: a resume point now goes on exactly (see resume_point.ResumePoints)."""
        return self.eval_for is None and not any(s.live and s.attached.should_stop for s in self.seeds)

    def losses_read(self, steps: list[int], scored: list, full: list, at_step: bool) -> None:
        """A read of the stack's losses (scored and full [n][K]): each live seed takes its own in
        (``RunLosses``). A seed whose loss became non-finite ends as ``diverged``, one whose callback
        raised as ``failed``; at a step's read the live seeds log that step's losses."""
        for seed in [s for s in self.seeds if s.live]:
            k, view = seed.index, seed.joined
            losses = [v[k] for v in scored]
            diverged = view.take_losses(steps, losses, [v[k] for v in full])
            if diverged is not None:
                seed.diverge(diverged)
                continue
            try:
                view.deliver_losses(seed.callbacks, seed.trainer, steps, losses)
            except Exception as error:
                seed.fail(error)
        if at_step:
            for seed in [s for s in self.seeds if s.live]:
                seed.log(seed.joined.step_metrics(), steps[-1])

    def evaluated(self, results: list[EvalResult | None]) -> None:
        """An eval of the seeds in the step (one EvalResult each; None for a seed that left it): the
        live seeds it was for take theirs."""
        for seed, result in zip(self.seeds, results):
            if result is not None and seed.live and (self.eval_for is None or seed in self.eval_for):
                seed.joined.last_eval = result
                seed.log(eval_metrics(result), self.stack.global_step - 1)  # the step Lightning logs a run's eval at

    def fan_out(self, name: str, trainer: L.Trainer, args: tuple, kwargs: dict) -> None:
        stack, seeds = self.stack, self.seeds
        if name == "setup":
            for seed in seeds:
                seed.attach(trainer)
        if name == "on_train_batch_start" and any(s.live and s.attached.should_stop for s in seeds):
            stack.read_losses()  # a stopping seed's last losses reach its callbacks, as at a run's end
            for seed in [s for s in seeds if s.live and s.attached.should_stop]:
                seed.stop()
        receivers = [s for s in seeds if s.live]
        if name.startswith("on_validation") and self.eval_for is not None:
            receivers = [s for s in receivers if s in self.eval_for]
        for seed in receivers:
            try:
                seed.hook(name, *_seed_args(name, seed, stack, args), **kwargs)
            except Exception as error:
                seed.fail(error)
        if (name == "on_validation_end" and self.stop_group is not None and self.eval_for is None
                and not trainer.sanity_checking):
            self._ask_stop_group(stack.global_step)
        live = [s for s in seeds if s.live]
        stopping = [s for s in live if s.attached.should_stop]
        every = trainer.val_check_batch  # steps between evals (set by the Trainer before training)
        if (name == "on_train_batch_end" and stopping and len(stopping) < len(live)
                and every is not None and trainer.global_step % every != 0):
            # Lightning evaluates once more when a stop is asked between evals: for these seeds only.
            self.eval_for = stopping
            trainer.should_stop = True
        elif name == "on_validation_end" and self.eval_for is not None:
            self.eval_for = None
            trainer.should_stop = False  # the others go on
        if not live or len(stopping) == len(live):
            trainer.should_stop = True
        # The forwards that follow see the live seeds' attention biases as the hooks left them.
        stack.bias = stack_bias([s.joined.attention_bias if s.live else {} for s in seeds], stack.device)

    def _ask_stop_group(self, step: int) -> None:
        """After an eval of every seed: a section from ``stop_group`` ends every live seed that is not
        ending already (an emerged one ends as emerged)."""
        assert self.stop_group is not None
        section = self.stop_group.check(step, [outcome(s) for s in self.seeds])
        if section is None:
            return
        for seed in self.seeds:
            if seed.live and not seed.attached.should_stop:
                seed.note = {**seed.note, "pruned": section}
                seed.attached.should_stop = True


def _forward(name: str) -> Callable[..., None]:
    def hook(self: SeedCallbacks, trainer: L.Trainer, pl_module: Any, *args: Any, **kwargs: Any) -> None:
        self.fan_out(name, trainer, args, kwargs)

    hook.__name__ = name
    return hook


for _name in HOOKS:
    setattr(SeedCallbacks, _name, _forward(_name))
