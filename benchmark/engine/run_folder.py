"""A run's folder and its row: the lock that makes one process its trainer (``RunLock``), the row as
far as it is known before training (``new_row``), the folder that holds both until the row is
written once (``RunFolder``), and the row of a run whose process died (``record_lost``). A single run
and each seed of a seed-parallel group write their rows through it."""

from __future__ import annotations

import fcntl
import os
import shutil
import time
import traceback
from pathlib import Path
from typing import Any, cast

import lightning as L
import torch
from lightning.pytorch.loggers import Logger

from emergence_bench.callbacks.checkpoints import CheckpointSchedule
from emergence_bench.callbacks.progress import ProgressLine
from emergence_bench.callbacks.recorder import Recorder
from emergence_bench.config import RunConfig, dump_yaml
from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.resume_point import Point
from emergence_bench.engine.trainer import build_logger
from emergence_bench.machine.devices import accelerator_device, describe_device
from emergence_bench.machine.threads import cpu_share
from emergence_bench.results.atomic import ResultsUnwritable, is_disk_error, unwritable
from emergence_bench.results.row import ResultRow, Row
from emergence_bench.results.store import (
    CONFIG_FILE,
    LOCKS_DIR,
    RESULT_FILE,
    SCHEMA_VERSION,
    is_finished,
    provenance,
    read_result,
    versions,
    without_non_finite,
    write_json,
    write_text,
)


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

    Held under the run's lock (``RunLock``) from creation until the row is written. Made by ``start``
    (at creation, unless ``start=False``: then the caller, holding the lock, calls it once it knows
    whether the run goes on from a resume point): emptied of an interrupted attempt's files, or kept
    as they are where the run resumes, and given the resolved config; ``finish`` completes the row and
    writes it, once. Once the folder exists every failure ends with a row: a config that cannot be
    saved finishes it as failed at once (``done``). ``unfinished_only``: raise RunBusy when the run
    already has a finished row (another sweep on this folder finished it since this one looked).
    A disk error (full, no permission) raises ResultsUnwritable.
    """

    def __init__(self, config: RunConfig, out: str | Path, unfinished_only: bool = False, start: bool = True) -> None:
        self.config = config
        self.run_id = config.run_id()
        self.path = Path(out) / self.run_id
        self.lock = RunLock(Path(out), self.run_id)
        if unfinished_only and is_finished(self.path):
            self.lock.release()
            raise RunBusy(f"run {self.run_id} in {out} was finished by another process meanwhile")
        self._make(empty=False)  # at once: a run whose process dies from here on gets a row (record_lost)
        self.recorder = Recorder(curve_every=config.trainer.log_every)
        self.record = new_row(config)
        self.done = False
        self.resumed_at: int | None = None  # the step it goes on from (a resume point's)
        if start:
            self.start()

    def start(self, resumed: Point | None = None) -> None:
        """Make the folder: empty, or, where the run goes on from ``resumed``, with the files of its
        earlier pieces (logs, checkpoints) kept and the row saying when it started and where it
        resumed. Then save the config."""
        self._make(empty=resumed is None)
        if resumed is not None:
            self.record.update(cast(ResultRow, resumed.row(self.run_id)))
            self.resumed_at = resumed.step
        try:
            write_text(self.path / CONFIG_FILE, dump_yaml(self.config.to_dict()))
        except Exception as error:
            self.finish("failed", failure(error), None, None, None)

    def _make(self, empty: bool) -> None:
        """The folder, emptied of an earlier attempt's files when ``empty``; a row written for it when its
        process died goes either way. A disk error releases the lock and raises ResultsUnwritable."""
        try:
            if empty and self.path.exists():
                shutil.rmtree(self.path)
            (self.path / RESULT_FILE).unlink(missing_ok=True)
            self.path.mkdir(parents=True, exist_ok=True)
        except BaseException as error:
            self.lock.release()
            if is_disk_error(error):
                raise unwritable(self.path, error) from error
            raise

    def logger(self) -> Logger:
        """The run's Lightning logger (``trainer.logger``: see emergence_bench.engine.trainer.build_logger);
        a resumed run's TensorBoard drops what its earlier piece logged past the step it resumes from."""
        return build_logger(self.config, self.path, purge_step=self.resumed_at)

    def callbacks(self, measured: list[L.Callback], progress: bool) -> list[L.Callback]:
        """Every callback of the run: the config's (``measured``, built by ``run.build_callbacks``), the
        recorder, checkpoints, a progress line."""
        c = self.config
        callbacks = measured + [self.recorder]
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
            device = accelerator_device(self.config.trainer.accelerator) or module.device
            self.record["device"] = describe_device(device)
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


class EndedFolder(RunFolder):
    """The folder of a group's seed that ended before the resume point the group goes on from: its
    row, read back. The seed keeps its slot in the stack but trains no more, so the folder takes no
    lock and writes nothing (``done``)."""

    def __init__(self, config: RunConfig, out: str | Path, record: ResultRow) -> None:  # no lock: nothing to write
        self.config, self.run_id = config, config.run_id()
        self.path = Path(out) / self.run_id
        self.record, self.done, self.resumed_at = record, True, None


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
