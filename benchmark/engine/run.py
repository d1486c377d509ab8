"""emergence_bench.engine.run(config, out): one experiment from a config to a result.json.

    DIR/<run_id>/config.yaml     the fully resolved config (re-run it with `emergence-bench run`)
    DIR/<run_id>/tensorboard/    the logger's files (trainer.logger: tensorboard/, csv/ or wandb/)
    DIR/<run_id>/result.json     the result row, written atomically at the end (ok | diverged | failed)
    DIR/<run_id>/checkpoints/    model weights at the steps of `checkpoints:` (when configured)

The builders a seed-parallel group shares with a single run are here too (the task, the model, the
callbacks, the plan); the run folder and its row are ``emergence_bench.engine.run_folder``'s, the Trainer
``emergence_bench.engine.trainer``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import lightning as L
import torch

from emergence_bench import registry
from emergence_bench.config import ConfigError, RunConfig, resolve
from emergence_bench.engine.curriculum import check_transitions, pretrain, stage_tasks
from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.module import EmergenceModule
from emergence_bench.engine.resume_point import (
    Point,
    ResumePoints,
    compared,
    environment,
    new_header,
    read_point,
    refuse,
)
from emergence_bench.engine.run_folder import RunFolder, failure
from emergence_bench.engine.trainer import build_trainer, quiet_lightning
from emergence_bench.engine.training import Diverged
from emergence_bench.machine.allocator import keep_freed_memory
from emergence_bench.machine.threads import choose_threads, step_flops
from emergence_bench.mixers.init import WeightInit
from emergence_bench.results.row import ResultRow
from emergence_bench.tasks.base import SyntheticTask

__all__ = ["RunPlan", "apply_threads", "build_callbacks", "build_model", "build_task", "plan", "run"]


def build_task(config: RunConfig) -> SyntheticTask:
    task = registry.tasks.get(config.task.name)(**config.task.params)
    task.configure_streams(data_seed=config.seed, eval_batches=config.trainer.eval_batches)
    return task


def build_model(config: RunConfig, task: SyntheticTask) -> SequenceModel:
    """The run's model; with a curriculum, sized for its first stage's vocabulary and the longest task."""
    m = config.model
    vocab, max_len = task.vocab_size, task.seq_len
    if config.curriculum:
        stages = stage_tasks(config)
        vocab, max_len = stages[0].vocab_size, max([max_len] + [t.seq_len for t in stages])
    return SequenceModel(vocab, max_len, config.mixer.to_dict(), m.d_model, m.n_layers, m.mlp_ratio,
                         WeightInit(m.init, m.init_std, m.init_scale))


def build_callbacks(config: RunConfig, task: SyntheticTask) -> list[L.Callback]:
    """The measurement and intervention callbacks the config names, in its order."""
    return [registry.callbacks.get(c.name)(task=task, **c.params) for c in config.callbacks]


@dataclass(frozen=True)
class RunPlan:
    """A run checked and sized before anything trains, from one resolve of its config and one build
    of its task and of its model on the meta device: the resolved config, the task (the one the run
    trains on), and what the thread policy reads (the model's parameter count, the task's batch size
    and sequence length). Made once by ``plan`` and handed to whatever needs the run: ``run``, a
    seed-parallel group and each of its seeds, the thread policy, a sweep's queue."""

    config: RunConfig
    task: SyntheticTask = field(compare=False, repr=False)
    parameters: int
    batch_size: int
    seq_len: int


def plan(config: dict | RunConfig | RunPlan) -> RunPlan:
    """Resolve ``config`` and build its task and model (without allocating weights), so every bad
    key or parameter raises here, before anything trains. A RunConfig is resolved already (only
    ``resolve`` makes one) and is not resolved again; a plan is returned as it is.

    The task is built once, here: a task draws its instance from its own task seed (tasks/base.py),
    never from the global RNG, so building it before the run seeds changes nothing the run computes;
    one that does draw from it is refused (ConfigError), since its instance would not be reproducible."""
    if isinstance(config, RunPlan):
        return config
    if not isinstance(config, RunConfig):
        config = resolve(config)
    before = torch.get_rng_state()
    try:
        task = build_task(config)
    except (RuntimeError, MemoryError, OverflowError) as error:  # sizes no tensor can have: the input's fault
        params = " ".join(f"{k}={v}" for k, v in config.task.params.items())
        raise ConfigError(f"task {config.task.name!r} cannot be built with {params}: {type(error).__name__}: "
                          f"{str(error).splitlines()[0] if str(error) else 'out of memory'} (is a size too "
                          "large for this machine?)") from None
    if not torch.equal(before, torch.get_rng_state()):
        raise ConfigError(f"task {config.task.name!r} draws from torch's global RNG while it is built: draw "
                          "its instance from a generator seeded by its task_seed (see tasks/base.py)")
    with torch.device("meta"):
        model = build_model(config, task)
    for callback in build_callbacks(config, task):
        check_model = getattr(callback, "check_model", None)
        if callable(check_model):  # e.g. a bias naming a layer the model lacks
            check_model(model)
    if config.curriculum:
        check_transitions(config, stage_tasks(config), task)
    return RunPlan(config, task, sum(p.numel() for p in model.parameters()), task.batch_size, task.seq_len)


def apply_threads(planned: RunPlan, seeds: int = 1) -> int:
    """Set torch's intra-op threads by ``trainer.threads`` (see threads.choose_threads) for a run of
    ``seeds`` models of the planned config trained together; returns the count. The inter-op pool is
    left alone: torch allows setting it only before any parallel work, and the suite does not use it."""
    work = step_flops(planned.parameters * seeds, planned.batch_size, planned.seq_len)
    threads = choose_threads(planned.config.trainer.threads, work)
    torch.set_num_threads(threads)
    return threads


def run(config: dict | RunConfig | RunPlan, out: str | Path, progress: bool = False, unfinished_only: bool = False,
        extra: dict | None = None) -> ResultRow:
    """Train one config (planned here, unless its plan is given) and write its result row under
    ``out/<run_id>/``; returns the row. ``extra`` (e.g. the seed-parallel fallback's note) joins the
    row before it is written, once, under the run's lock.

    A NaN loss gives status ``diverged`` and any other error once the folder exists ``failed`` (with
    the traceback), so every run that starts ends with its row;
    an interrupt (Ctrl-C) raises KeyboardInterrupt and writes nothing, so a resumed sweep runs it again.
    RunBusy when another process is training the run (or, with ``unfinished_only``, has finished it).
    """
    planned = plan(config)
    config = planned.config
    apply_threads(planned)  # before the folder, which records it; a count above the cores raises here
    keep_freed_memory(config.trainer.keep_freed_memory)
    quiet_lightning()
    folder = RunFolder(config, out, unfinished_only, start=False)
    point = None if config.curriculum else _point(config, Path(out))  # under the run's lock
    folder.start(point)
    if folder.done:  # its config could not be saved: the row says so
        return folder.record
    trainer = module = points = None
    status, error = "ok", None
    try:
        L.seed_everything(config.seed, verbose=False)
        task = planned.task  # built by the plan, from its own seed
        model = build_model(config, task)
        if config.trainer.compile:
            model.compile()  # in place: parameter names (and checkpoints) stay as they are
        carried = None
        if config.curriculum:
            carried, folder.record["curriculum"] = pretrain(config, model, task, folder.path)
        module = EmergenceModule(model, task, config.optim, config.trainer.max_steps, config.trainer.train_on,
                                 initial_optimizer_state=carried, read_every=config.trainer.log_every,
                                 batch_order=config.trainer.batch_order)
        callbacks = folder.callbacks(build_callbacks(config, task), progress)
        if not config.curriculum:  # a curriculum's stages change the model as they go: not resumed
            header = new_header("run", [folder.run_id], [compared(config)], environment(config.trainer.accelerator),
                                {folder.run_id: folder.record["started_at"]}, {}, point)
            points = ResumePoints(Path(out), config.trainer.resume_every_s, header, lambda: [folder.run_id],
                                  resumed=point)
            callbacks.append(points)
        trainer = build_trainer(config, callbacks, folder.logger(), folder.path)
        trainer.fit(module, task, ckpt_path=None if point is None else point.path, weights_only=True)
    except SystemExit:  # Lightning turns Ctrl-C into exit(1) after a graceful shutdown
        raise KeyboardInterrupt(f"run {folder.run_id} interrupted") from None
    except Diverged as diverged:
        status, error = "diverged", str(diverged)
    except Exception as exception:
        status, error = "failed", failure(exception)
    row = folder.finish(status, error, trainer, module, module.model if module is not None else None, extra)
    if points is not None:
        points.discard()  # the run has its row
    return row


def _point(config: RunConfig, out: Path) -> Point | None:
    """The resume point the run goes on from, checked (its config, the code and machine), or None;
    one it cannot use is refused (a line, and removed)."""
    point, why = read_point(out, [config.run_id()])
    if point is not None:
        why = point.mismatch("run", [config], environment(config.trainer.accelerator))
    if why is not None:
        refuse(out, [config.run_id()], why)
        return None
    return point
