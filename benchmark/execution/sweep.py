"""Running a sweep: every unfinished run of a ``Sweep`` (``emergence_bench.execution.sweep_spec``) on
local worker processes (or Ray), seeds batched where asked, resumable, stopped cleanly by a signal.

Every run has a stable id (a hash of its resolved config), so rerunning a sweep skips the runs whose
result.json says ok or diverged, reruns failed and unfinished ones, and loses nothing finished.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from contextlib import contextmanager
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from emergence_bench.config import Batching, ConfigError, RunConfig, resolve
from emergence_bench.execution.sweep_spec import Sweep
from emergence_bench.execution.workers import Interrupted, Workers, WorkerLost
from emergence_bench.machine.threads import available_cpus, set_cpu_share
from emergence_bench.result_row import Row
from emergence_bench.results import (ResultsUnwritable, busy_row, is_finished, lost_summary, progress_summary,
                                     read_result)


# --- execution --------------------------------------------------------------------------------
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # a scheduler's stop, Ctrl-C, a closed terminal


class SweepStopped(KeyboardInterrupt):
    """A sweep stopped by a signal of STOP_SIGNALS, its workers stopped and its line printed;
    ``exit_code`` is 128 + the signal's number (143 for SIGTERM, 130 for SIGINT, 129 for SIGHUP),
    as a shell reports a process that signal ended."""

    def __init__(self, signum: int, line: str) -> None:
        super().__init__(line)
        self.signum, self.exit_code = signum, 128 + signum


@contextmanager
def stop_signals() -> Iterator[list[int]]:
    """While the sweep runs: the first signal of STOP_SIGNALS raises KeyboardInterrupt in the driver
    (which stops the workers), and any later one is only noted, so the stopping is not cut short.
    Yields the list of the signals received. Off the main thread (where Python takes no signals), nothing."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) == 1:
            raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield received
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _init_worker(share: int) -> None:
    """A worker process: its share of the cores, which each run's thread policy stays within."""
    import torch

    for signum in STOP_SIGNALS:  # the driver's to handle: it stops the workers itself
        signal.signal(signum, signal.SIG_IGN)
    set_cpu_share(share)
    torch.set_num_threads(share)  # until a run applies its own trainer.threads (emergence_bench.run.apply_threads)


def worker_share(workers: int, cpus: int | None = None) -> int:
    """The cores each of ``workers`` local worker processes may use: cores // workers, at least 1."""
    return max(1, (available_cpus() if cpus is None else cpus) // max(1, workers))


def check_threads_fit(configs: list[RunConfig], share: int, workers: int) -> None:
    """Every run's ``trainer.threads`` fits its worker's share, so workers × threads ≤ cores; raised
    before any run starts."""
    for config in configs:
        threads = config.trainer.threads
        if isinstance(threads, int) and threads > share:
            raise ConfigError(f"trainer.threads={threads} with {workers} worker(s) needs {threads * workers} cores; "
                              f"this machine has {available_cpus()}: use --threads {share} (or auto) or fewer --workers")


def _run_one(config: dict, out: str) -> dict:
    """One run, unless another process (a second sweep on this folder) holds it or finished it."""
    from emergence_bench.run import RunBusy, run

    try:
        return progress_summary(run(config, out, unfinished_only=True))
    except RunBusy as busy:
        return busy_row(resolve(config).run_id(), busy)


def _run_group(configs: list[dict], out: str, batching: Batching = "auto") -> list[dict]:
    """Seeds of one config trained together (see emergence_bench.execution.seed_parallel)."""
    from emergence_bench.execution.seed_parallel import run_seed_parallel

    return [progress_summary(record) for record in
            run_seed_parallel(configs, out, batching=batching, unfinished_only=True)]


def seed_groups(pending: list, k: int) -> list[tuple[Path, list[RunConfig]]]:
    """``pending`` [(folder, config)] as jobs of up to ``k`` configs equal but for the seed."""
    by_config: dict[tuple, list] = {}
    for run_out, config in pending:
        data = config.to_dict()
        data.pop("seed")
        by_config.setdefault((str(run_out), json.dumps(data, sort_keys=True)), []).append(config)
    jobs = []
    for (run_out, _), configs in by_config.items():
        jobs += [(Path(run_out), configs[i:i + k]) for i in range(0, len(configs), k)]
    return jobs


def clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    """The one-line status after each run: done/total, failures, ETA."""

    def __init__(self, name: str, total: int, skipped: int, stream: TextIO | None = None) -> None:
        self.name, self.total, self.stream = name, total, stream or sys.stderr
        self.done = self.skipped = skipped
        self.counts = {"ok": 0, "diverged": 0, "failed": 0, "busy": 0}
        self.started = time.perf_counter()

    def update(self, summary: dict) -> None:
        self.done += 1
        self.counts[summary["status"]] = self.counts.get(summary["status"], 0) + 1
        elapsed = time.perf_counter() - self.started
        ran = self.done - self.skipped
        eta = elapsed / ran * (self.total - self.done)
        emerged = summary["emergence_step"]
        what = summary["status"] + (f", emerged at step {emerged}" if emerged is not None else "")
        if summary["error"]:
            what += f": {summary['error']}"
        print(f"[{self.name}] {self.done}/{self.total} done · failed {self.counts['failed']} · "
              f"diverged {self.counts['diverged']} · elapsed {clock(elapsed)} · eta {clock(eta)} · "
              f"{summary['run_id']} {what}", file=self.stream, flush=True)


def run_sweep(sweep: Sweep, out: str | Path, workers: int = 1, stream: TextIO | None = None, executor: str = "local",
              ray_options: dict | None = None, seed_parallel: int = 1, batching: str = "auto") -> dict:
    """Run every unfinished run of ``sweep`` under ``out``; returns counts by status.

    ``executor`` is ``local`` (``workers`` processes on this machine) or ``ray`` (one Ray task per run;
    ``ray_options``: address, num_cpus, num_gpus, max_retries — see emergence_bench.execution.ray_executor).
    With ``seed_parallel`` K > 1 (local only), runs that differ only in their seed train K at a time
    as one batched model, each still with its own result row; with ``batching="auto"`` (the default)
    a group is batched only where a short probe measures that it pays (``run_seed_parallel``).

    Faults (docs/faults.md): SIGTERM, SIGINT or SIGHUP stops every worker (local or Ray), keeps the
    finished results, leaves the running runs unfinished (rerun on resume), prints one line saying so
    and raises SweepStopped. A local worker killed mid-run loses that run only: it gets a failed row
    saying so and the sweep goes on. A results folder that cannot be written (a full disk) stops the
    sweep with ResultsUnwritable.
    """
    if not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"--workers must be a whole number ≥ 1, got {workers}")
    if not isinstance(seed_parallel, int) or seed_parallel < 1:
        raise ConfigError(f"--seed-parallel must be a whole number ≥ 1, got {seed_parallel}")
    out, stream = Path(out), stream or sys.stderr  # stderr as it is now (a test may have replaced it)
    runs = sweep.runs()
    pending = [(out / group, config) for group, config in runs
               if not is_finished(out / group / config.run_id())]
    skipped = len(runs) - len(pending)
    share = worker_share(workers)
    if executor == "local":
        check_threads_fit([c for _, c in pending], share, workers)
    where = "on Ray" if executor == "ray" else f"with {workers} worker(s) of ≤ {share} thread(s)"
    print(f"[{sweep.name}] {len(runs)} runs, {skipped} already finished, {len(pending)} to run {where} → {out}",
          file=stream, flush=True)
    progress = Progress(sweep.name, len(runs), skipped, stream)
    if executor not in ("local", "ray"):
        raise ConfigError(f"executor must be local or ray, got {executor!r}")
    if executor == "ray" and seed_parallel > 1:
        raise ConfigError("--seed-parallel runs with the local executor only (Ray runs one task per run)")
    # A job is (function, arguments, the runs it covers as [(folder, config)]): one run, or a group of seeds.
    jobs: list[tuple[Callable[..., list[dict] | dict], tuple, list[tuple[Path, RunConfig]]]]
    if seed_parallel > 1:
        jobs = [(_run_group, ([c.to_dict() for c in configs], str(run_out), batching), [(run_out, c) for c in configs])
                for run_out, configs in seed_groups(pending, seed_parallel)]
    else:
        jobs = [(_run_one, (c.to_dict(), str(run_out)), [(run_out, c)]) for run_out, c in pending]

    def report(results: list[dict] | dict) -> None:
        for result in results if isinstance(results, list) else [results]:
            progress.update(result)

    with stop_signals() as received:
        try:
            if executor == "ray":
                from emergence_bench.execution.ray_executor import run_on_ray

                run_on_ray(pending, progress.update, **(ray_options or {}))
            elif workers <= 1:
                for function, args, _ in jobs:
                    report(function(*args))
            else:
                _run_local(jobs, workers, share, report)
        except KeyboardInterrupt:
            signum = received[0] if received else signal.SIGINT
            finished = sum(is_finished(out / group / c.run_id()) for group, c in runs)
            line = (f"[{sweep.name}] stopped by {signal.Signals(signum).name}: {finished} of {len(runs)} runs finished, "
                    f"their results kept in {out}; the other {len(runs) - finished} (those that were running among "
                    f"them) are left unfinished: rerun the same command to resume")
            print(line, file=stream, flush=True)
            raise SweepStopped(signum, line) from None
    return {"total": len(runs), "skipped": skipped, "wall_seconds": round(time.perf_counter() - progress.started, 1),
            **progress.counts}


def _run_local(jobs: list, workers: int, share: int, report: Callable[[Any], None]) -> None:
    """``jobs`` on ``workers`` local processes (see emergence_bench.execution.workers), each result
    reported as it comes. A job whose worker died is reported lost (its started runs get a failed row
    saying so) and the rest go on; a results folder that cannot be written stops them all."""
    pool = Workers(workers, _init_worker, (share,))
    try:
        for index, result in pool.results([(function, args) for function, args, _ in jobs]):
            if isinstance(result, ResultsUnwritable):
                raise result
            if isinstance(result, BaseException):
                report(_lost(jobs[index][2], result))
            else:
                report(result)
    finally:
        pool.stop()


def _lost(runs: list[tuple[Path, RunConfig]], error: BaseException) -> list[dict]:
    """The summaries of a job's runs that ended without their own report: a run whose worker died
    mid-run gets a failed row saying so (``record_lost``); a run that finished keeps its row, and a run
    interrupted by a signal to its worker (or failed by an error outside it) none."""
    from emergence_bench.run import record_lost

    summaries = []
    for run_out, config in runs:
        row: Row | None = None
        if isinstance(error, WorkerLost):
            row = record_lost(config, run_out, f"WorkerLost: {error}; rerun the sweep to train it again")
        elif not isinstance(error, Interrupted):
            row = read_result(run_out / config.run_id())
        summaries.append(progress_summary(row) if row else lost_summary(config.run_id(), error))
    return summaries
