"""emergence_bench.run(config, out): one experiment from a config to a result.json.

    DIR/<run_id>/config.yaml     the fully resolved config (re-run it with `emergence-bench run`)
    DIR/<run_id>/tensorboard/    the logger's files (trainer.logger: tensorboard/, csv/ or wandb/)
    DIR/<run_id>/result.json     the result row, written atomically at the end (ok | diverged | failed)
    DIR/<run_id>/checkpoints/    model weights at the steps of `checkpoints:` (when configured)

The pieces a seed-parallel group shares with a single run are here too: the run folder and its
record with every callback of the run (``RunFolder``); the Trainer is ``emergence_bench.trainer``'s.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import lightning as L
import torch
from lightning.pytorch.loggers import Logger

from emergence_bench import registry
from emergence_bench.machine.allocator import keep_freed_memory
from emergence_bench.callbacks.checkpoints import CheckpointSchedule
from emergence_bench.callbacks.progress import ProgressLine
from emergence_bench.callbacks.recorder import Recorder
from emergence_bench.config import RunConfig, dump_yaml, resolve
from emergence_bench.curriculum import check_transitions, pretrain, stage_tasks
from emergence_bench.model import SequenceModel
from emergence_bench.module import EmergenceModule
from emergence_bench.training import Diverged
from emergence_bench.mixers.init import WeightInit
from emergence_bench.machine.devices import accelerator_device, describe_device
from emergence_bench.result_row import ResultRow, Row
from emergence_bench.results import (CONFIG_FILE, LOCKS_DIR, RESULT_FILE, SCHEMA_VERSION, ResultsUnwritable,
                                     is_disk_error, is_finished, provenance, read_result, unwritable, versions, without_non_finite,
                                     write_json, write_text)
from emergence_bench.trainer import build_logger, build_trainer, quiet_lightning
from emergence_bench.tasks.base import SyntheticTask
from emergence_bench.machine.threads import choose_threads, cpu_share, step_flops


def build_task(config: RunConfig) -> SyntheticTask:
    params = {k: v for k, v in config.task.items() if k != "name"}
    task = registry.tasks.get(config.task["name"])(**params)
    task.configure_streams(data_seed=config.seed, eval_batches=config.trainer.eval_batches)
    return task


def build_model(config: RunConfig, task: SyntheticTask) -> SequenceModel:
    """The run's model; with a curriculum, sized for its first stage's vocabulary and the longest task."""
    m = config.model
    vocab, max_len = task.vocab_size, task.seq_len
    if config.curriculum:
        stages = stage_tasks(config)
        vocab, max_len = stages[0].vocab_size, max([max_len] + [t.seq_len for t in stages])
    return SequenceModel(vocab, max_len, config.mixer, m.d_model, m.n_layers, m.mlp_ratio,
                         WeightInit(m.init, m.init_std, m.init_scale))


def build_callbacks(config: RunConfig, task: SyntheticTask) -> list[L.Callback]:
    """The measurement and intervention callbacks the config names, in its order."""
    return [registry.callbacks.get(name)(task=task, **params) for name, params in config.callbacks.items()]


@dataclass(frozen=True)
class RunPlan:
    """A run checked and sized before anything trains, from one build of its task and model on the
    meta device: the resolved config, and what the thread policy reads (the model's parameter count,
    the task's batch size and sequence length)."""

    config: RunConfig
    parameters: int
    batch_size: int
    seq_len: int


def plan(config: dict | RunConfig | RunPlan) -> RunPlan:
    """Resolve ``config`` and build its task and model (without allocating weights), so every bad
    key or parameter raises here, before anything trains. A plan is returned as it is."""
    if isinstance(config, RunPlan):
        return config
    config = resolve(config)
    task = build_task(config)
    with torch.device("meta"):
        model = build_model(config, task)
    for callback in build_callbacks(config, task):
        check_model = getattr(callback, "check_model", None)
        if callable(check_model):  # e.g. a bias naming a layer the model lacks
            check_model(model)
    if config.curriculum:
        check_transitions(config, stage_tasks(config), task)
    return RunPlan(config, sum(p.numel() for p in model.parameters()), task.batch_size, task.seq_len)


def check(config: dict | RunConfig | RunPlan) -> RunConfig:
    """``config`` resolved and checked (``plan``)."""
    return plan(config).config


def apply_threads(config: RunConfig | RunPlan, seeds: int = 1) -> int:
    """Set torch's intra-op threads by ``config.trainer.threads`` (see threads.choose_threads) for a
    run of ``seeds`` models of this config trained together; returns the count. The inter-op pool is
    left alone: torch allows setting it only before any parallel work, and the suite does not use it."""
    sized = plan(config)  # a plan's sizes as they are; a config is planned first
    work = step_flops(sized.parameters * seeds, sized.batch_size, sized.seq_len)
    threads = choose_threads(sized.config.trainer.threads, work)
    torch.set_num_threads(threads)
    return threads


class RunBusy(RuntimeError):
    """Another process holds this run: it is training it, or (for a sweep) finished it meanwhile."""


class RunLock:
    """An exclusive lock on one run of a results folder, ``out/.locks/<run_id>.lock`` (flock: the
    kernel drops it when its process dies, so a killed sweep leaves no stale lock). Two sweeps or
    runs on one folder never train the same run at once nor interleave its writes."""

    def __init__(self, out: Path, run_id: str) -> None:
        path = out / LOCKS_DIR / f"{run_id}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(path, "a+")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.seek(0)
            holder = self.file.read().strip() or "another process"
            self.file.close()
            raise RunBusy(f"run {run_id} in {out} is being trained by {holder}") from None
        self.file.seek(0)
        self.file.truncate()
        self.file.write(f"process {os.getpid()} since {time.strftime('%H:%M:%S')}")
        self.file.flush()

    def release(self) -> None:
        if not self.file.closed:
            self.file.close()  # closing the file drops the lock


def new_row(config: RunConfig, status: str = "ok", error: str | None = None) -> ResultRow:
    """A run's result row as far as it is known before it trains."""
    return cast(ResultRow, {
        "schema_version": SCHEMA_VERSION, "run_id": config.run_id(), "status": status, "error": error,
        "seed": config.seed, "config": config.to_dict(), "backend": None, "device": None,
        "threads": torch.get_num_threads(),  # intra-op threads it trains with (see apply_threads)
        "versions": versions(), "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "provenance": provenance({"setting": config.trainer.threads, "used": torch.get_num_threads(),
                                  "cores": cpu_share(), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS")}),
    })


class RunFolder:
    """``out/<run_id>/`` of one config and the result row written there.

    Held under the run's lock (``RunLock``) from creation until the row is written. Created empty
    (leftovers of an interrupted attempt are removed) with the resolved config; ``finish`` completes
    the row and writes it, once. Once the folder exists every failure ends with a row: a config that
    cannot be saved finishes it as failed at once (``done``). ``unfinished_only``: raise RunBusy when the
    run already has a finished row (another sweep on this folder finished it since this one looked).
    A disk error (full, no permission) raises ResultsUnwritable.
    """

    def __init__(self, config: RunConfig, out: str | Path, unfinished_only: bool = False) -> None:
        self.config = config
        self.run_id = config.run_id()
        self.path = Path(out) / self.run_id
        self.lock = RunLock(Path(out), self.run_id)
        if unfinished_only and is_finished(self.path):
            self.lock.release()
            raise RunBusy(f"run {self.run_id} in {out} was finished by another process meanwhile")
        try:
            if self.path.exists():
                shutil.rmtree(self.path)
            self.path.mkdir(parents=True)
        except BaseException as error:
            self.lock.release()
            if is_disk_error(error):
                raise unwritable(self.path, error) from error
            raise
        self.recorder = Recorder(curve_every=config.trainer.log_every)
        self.record = new_row(config)
        self.done = False
        try:
            write_text(self.path / CONFIG_FILE, dump_yaml(config.to_dict()))
        except Exception as error:
            self.finish("failed", failure(error), None, None, None)

    def logger(self) -> Logger:
        """The run's Lightning logger (``trainer.logger``: see emergence_bench.trainer.build_logger)."""
        return build_logger(self.config, self.path)

    def callbacks(self, task: SyntheticTask, progress: bool) -> list[L.Callback]:
        """Every callback of the run: the config's, the recorder, checkpoints, a progress line."""
        c = self.config
        callbacks = build_callbacks(c, task) + [self.recorder]
        if c.checkpoints.every or c.checkpoints.log_spaced:
            callbacks.append(CheckpointSchedule(self.path, c.trainer.max_steps, c.checkpoints.every,
                                                c.checkpoints.log_spaced))
        if progress:
            callbacks.append(ProgressLine(prefix=f"[{self.run_id}] "))
        return callbacks

    def finish(self, status: str, error: str | None, trainer: Any, module: Any, model: SequenceModel | None,
               extra: dict | None = None) -> ResultRow:
        """Complete the row (status, backend, device, every callback's columns) and write it, once.
        It is written whatever fails here: columns that cannot be read make it failed, saying why."""
        if self.done:
            return self.record
        self.done = True
        try:
            try:
                self._complete(status, error, trainer, module, model, extra)
            except Exception as problem:
                self.record.update(cast(ResultRow, {"status": "failed", "error": _joined(
                    error, f"its columns could not be read: {failure(problem)}")}))
            self._write()
        finally:
            self.lock.release()
        return self.record

    def _complete(self, status: str, error: str | None, trainer: Any, module: Any, model: SequenceModel | None,
                  extra: dict | None) -> None:
        if status != "ok":
            self.record.update(cast(ResultRow, {"status": status, "error": error}))
        if model is not None:
            self.record["backend"] = "+".join(sorted({getattr(m, "backend", "torch") for m in model.mixers}))
            self.record["parameters"] = sum(p.numel() for p in model.parameters())
            # Numbers carried per sequence at inference after the whole sequence (None: a plugin that
            # does not state it); the ranking sets it beside quality.
            self.record["state_size"] = model.state_size(model.max_len)
        if module is not None:  # where it trained: Lightning moves the module back to the CPU at the end
            self.record["device"] = describe_device(accelerator_device(self.config.trainer.accelerator) or module.device)
        self.record.update(cast(ResultRow, {**self.recorder.columns(trainer, module), **(extra or {})}))

    def _write(self) -> None:
        """Write the row. A NaN or infinite number is written as null and named in ``non_finite``; a
        row that still cannot be written (a value JSON cannot hold) is replaced by a failed one
        saying why. A disk error raises (ResultsUnwritable): no other row could be written either."""
        row, non_finite = without_non_finite(self.record)
        if non_finite:
            row["non_finite"] = non_finite
        try:
            write_json(self.path / RESULT_FILE, row)
        except ResultsUnwritable:
            raise
        except Exception as problem:
            row = {**new_row(self.config, "failed", _joined(self.record.get("error"), "the result row could not "
                                                            f"be written: {failure(problem)}")),
                   "started_at": self.record["started_at"]}
            write_json(self.path / RESULT_FILE, row)
        self.record = row


def _joined(first: str | None, second: str) -> str:
    return f"{first}\n{second}" if first else second


def record_lost(config: RunConfig, out: str | Path, reason: str) -> Row | None:
    """The row of a run whose process died mid-run (SIGKILL, out of memory), which wrote none: a failed
    row saying ``reason``, so the leaderboard shows it and a resumed sweep reruns it. Returns the run's
    row (the one it has, if it finished after all), or None when it never started (no folder) or
    another process holds it now."""
    path = Path(out) / config.run_id()
    try:
        lock = RunLock(Path(out), config.run_id())
    except RunBusy:
        return None
    try:
        row = read_result(path)
        if row is None and path.is_dir():
            lost = new_row(config, "failed", reason)
            write_json(path / RESULT_FILE, lost)
            return lost
        return row
    finally:
        lock.release()


def failure(error: BaseException) -> str:
    """A failed row's error: the exception and its traceback."""
    return f"{type(error).__name__}: {error}\n{traceback.format_exc()}"


def run(config: dict | RunConfig | RunPlan, out: str | Path, progress: bool = False, unfinished_only: bool = False,
        extra: dict | None = None) -> ResultRow:
    """Train one config and write its result row under ``out/<run_id>/``; returns the row.
    ``extra`` (e.g. the seed-parallel fallback's note) joins the row before it is written, once,
    under the run's lock.

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
    folder = RunFolder(config, out, unfinished_only)
    if folder.done:  # its config could not be saved: the row says so
        return folder.record
    trainer = module = None
    status, error = "ok", None
    try:
        L.seed_everything(config.seed, verbose=False)
        task = build_task(config)
        model = build_model(config, task)
        if config.trainer.compile:
            model.compile()  # in place: parameter names (and checkpoints) stay as they are
        carried = None
        if config.curriculum:
            carried, folder.record["curriculum"] = pretrain(config, model, task, folder.path)
        module = EmergenceModule(model, task, config.optim, config.trainer.max_steps, config.trainer.train_on,
                                 initial_optimizer_state=carried, read_every=config.trainer.log_every)
        trainer = build_trainer(config, folder.callbacks(task, progress), folder.logger(), folder.path)
        trainer.fit(module, task)
    except SystemExit:  # Lightning turns Ctrl-C into exit(1) after a graceful shutdown
        raise KeyboardInterrupt(f"run {folder.run_id} interrupted") from None
    except Diverged as diverged:
        status, error = "diverged", str(diverged)
    except Exception as exception:
        status, error = "failed", failure(exception)
    return folder.finish(status, error, trainer, module, module.model if module is not None else None, extra)
