"""Running a sweep: every unfinished run of a ``Sweep`` (``emergence_bench.execution.sweep_spec``) on
local worker processes (or Ray), seeds batched where asked, resumable, stopped cleanly by a signal.

Every run has a stable id (a hash of its resolved config), so rerunning a sweep skips the runs whose
result.json says ok or diverged, reruns failed and unfinished ones, and loses nothing finished.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import json
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from emergence_bench.config import Batching, ConfigError, RunConfig, resolve
from emergence_bench.execution.pruning import Rivals
from emergence_bench.execution.stop_signals import STOP_SIGNALS, SweepStopped, stop_signals
from emergence_bench.execution.sweep_spec import Sweep
from emergence_bench.execution.workers import Interrupted, WorkerLost, Workers
from emergence_bench.machine.threads import available_cpus, set_cpu_share
from emergence_bench.results.atomic import ResultsUnwritable
from emergence_bench.results.row import Row
from emergence_bench.results.store import (
    busy_row,
    is_finished,
    lost_summary,
    progress_summary,
    read_result,
    write_ladder,
)

if TYPE_CHECKING:  # plans are the run module's; a sweep only reads their sizes
    from emergence_bench.engine.run import RunPlan

# --- execution --------------------------------------------------------------------------------
def _init_worker(share: int) -> None:
    """A worker process: its share of the cores, which each run's thread policy stays within."""
    import torch

    for signum in STOP_SIGNALS:  # the driver's to handle: it stops the workers itself
        signal.signal(signum, signal.SIG_IGN)
    set_cpu_share(share)
    # Until a run applies its own trainer.threads (emergence_bench.engine.run.apply_threads).
    torch.set_num_threads(share)


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
                              f"this machine has {available_cpus()}: use --threads {share} (or auto) "
                              "or fewer --workers")


def _run_one(config: dict, out: str) -> dict:
    """One run, unless another process (a second sweep on this folder) holds it or finished it."""
    from emergence_bench.engine.run import run
    from emergence_bench.engine.run_folder import RunBusy

    try:
        return progress_summary(run(config, out, unfinished_only=True))
    except RunBusy as busy:
        return busy_row(resolve(config).run_id(), busy)


def _run_group(configs: list[dict], out: str, batching: Batching = "auto", rivals: Rivals | None = None) -> list[dict]:
    """Seeds of one config trained together (see emergence_bench.engine.seed_parallel); ``rivals``:
    a tuning point's (execution/pruning.py), the group's stop."""
    from emergence_bench.engine.seed_parallel import run_seed_parallel
    return [progress_summary(record) for record in
            run_seed_parallel(configs, out, batching=batching, unfinished_only=True, stop=rivals)]


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
    """The one-line status after each run of one name: done/total, failures, ETA. Progresses that
    share a stream of runs (a tuning and its ranking) share ``peers``: the clock and the ETA are of
    them all."""

    def __init__(self, name: str, total: int, skipped: int, stream: TextIO | None = None,
                 peers: list[Progress] | None = None) -> None:
        self.name, self.total, self.stream = name, total, stream or sys.stderr
        self.done = self.skipped = skipped
        self.counts = {"ok": 0, "diverged": 0, "failed": 0, "busy": 0}
        self.peers = peers if peers is not None else []
        self.peers.append(self)
        self.started: float = self.peers[0].started if len(self.peers) > 1 else time.perf_counter()

    def grow(self, runs: int, finished: int) -> None:
        """``runs`` more runs of this name became known, ``finished`` of them finished already."""
        self.total += runs
        self.done += finished
        self.skipped += finished

    def update(self, summary: dict) -> None:
        self.done += 1
        self.counts[summary["status"]] = self.counts.get(summary["status"], 0) + 1
        elapsed = time.perf_counter() - self.started
        ran = sum(p.done - p.skipped for p in self.peers)
        eta = elapsed / ran * sum(p.total - p.done for p in self.peers)
        emerged = summary["emergence_step"]
        what = summary["status"] + (f", emerged at step {emerged}" if emerged is not None else "")
        if summary["error"]:
            what += f": {summary['error']}"
        print(f"[{self.name}] {self.done}/{self.total} done · failed {self.counts['failed']} · "
              f"diverged {self.counts['diverged']} · elapsed {clock(elapsed)} · eta {clock(eta)} · "
              f"{summary['run_id']} {what}", file=self.stream, flush=True)


@dataclass
class Stage:
    """Runs to train: those of ``sweep`` under ``out``, ``seed_parallel`` seeds at a time, on the
    progress line of the sweep's name."""

    sweep: Sweep
    out: Path
    seed_parallel: int = 1
    batching: str = "auto"
    priority: int = 0  # a stage of a lower priority is taken first (a tuning before the ranking it unlocks)
    rivals: dict[str, Rivals] = field(default_factory=dict)  # run id -> its tuning point's (pruning.py)

    @functools.cached_property
    def planned(self) -> list[tuple[Path, RunPlan]]:
        """Its runs, checked and sized once: (the run's folder's parent, its plan)."""
        return [(self.out / group, planned) for group, planned in self.sweep.plans()]


class Follow(Protocol):
    """What runs next, once some have finished: given the ids of runs just reported, the stages they
    unlock (a tuning's choice unlocks its ranking runs); none when they unlock nothing."""

    def __call__(self, finished: list[str]) -> list[Stage]: ...


# A job: (function, arguments, the runs it covers as [(folder, config)], the progress they report to).
Job = tuple[Callable[..., "list[dict] | dict"], tuple, list[tuple[Path, RunConfig]], Progress]


class JobQueue:
    """Jobs waiting for a worker: a lower stage priority first, then the most tokens per step first
    (the costliest-looking, so that short jobs end the sweep and no worker idles long at its end),
    then in the order they came."""

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, int, Job]] = []
        self.arrivals = itertools.count()

    def push(self, job: Job, priority: int, tokens: int) -> None:
        """Queue ``job``, whose step trains ``tokens`` tokens per seed."""
        heapq.heappush(self.heap, (priority, -tokens, next(self.arrivals), job))

    def pop(self) -> Job:
        return heapq.heappop(self.heap)[-1]

    def __len__(self) -> int:
        return len(self.heap)


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
    counts = run_stages([Stage(sweep, Path(out), seed_parallel, batching)], workers, stream, executor, ray_options)
    return {**counts[sweep.name], "wall_seconds": counts["wall_seconds"]}


def run_stages(stages: list[Stage], workers: int = 1, stream: TextIO | None = None, executor: str = "local",
               ray_options: dict | None = None, follow: Follow | None = None,
               announced: dict[str, int] | None = None) -> dict:
    """Run every unfinished run of ``stages`` on one set of workers, and of the stages ``follow``
    unlocks as runs finish (they join the queue at once: no stage waits for another to end, so the
    workers stay busy). Returns {sweep name: counts by status, with "total" and "skipped"} and
    "wall_seconds". ``announced`` gives a name's total runs where its later stages are not known
    yet: its header says so, and the ETA counts them from the first line. Arguments and faults as
    ``run_sweep``."""
    if not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"--workers must be a whole number ≥ 1, got {workers}")
    if executor not in ("local", "ray"):
        raise ConfigError(f"executor must be local or ray, got {executor!r}")
    for stage in stages:
        if not isinstance(stage.seed_parallel, int) or stage.seed_parallel < 1:
            raise ConfigError(f"--seed-parallel must be a whole number ≥ 1, got {stage.seed_parallel}")
        if executor == "ray" and stage.seed_parallel > 1:
            raise ConfigError("--seed-parallel runs with the local executor only (Ray runs one task per run)")
    stream = stream or sys.stderr  # stderr as it is now (a test may have replaced it)
    share = worker_share(workers)
    announced = announced or {}
    progresses: dict[str, Progress] = {}
    peers: list[Progress] = []
    every: list[tuple[Path, RunConfig]] = []  # every run known so far, for the stop line
    queue = JobQueue()
    known: dict[str, int] = {}  # runs of each name known so far
    folders: dict[str, Path] = {}
    shown: set[str] = set()  # names whose header is printed
    ladders_written: set[Path] = set()

    # A name announced before its stages are known (a ranking that waits for its tuning) counts in
    # every ETA from the start: an ETA of the tuning alone promised a fraction of the sweep's time.
    for name, total in announced.items():
        progresses[name] = Progress(name, total, 0, stream, peers)
        known[name] = 0

    def headers() -> None:
        """One line per name not introduced yet, once it has runs: its runs, how many finished, how many
        follow."""
        where = "on Ray" if executor == "ray" else f"with {workers} worker(s) of ≤ {share} thread(s)"
        for name, p in progresses.items():
            if name not in shown and known[name]:
                shown.add(name)
                later = (f" (the other {p.total - known[name]} follow their mixer's tuning)"
                         if p.total > known[name] else "")
                print(f"[{name}] {p.total} runs, {p.skipped} already finished, {known[name] - p.skipped} to run"
                      f"{later} {where} → {folders[name]}", file=stream, flush=True)

    def add(stage: Stage) -> None:
        # What `rank` reads of the preset: its ladder and the families outside the score. Written as each
        # stage joins, for a ranking that joins only once its mixers' tuning has chosen.
        if (stage.sweep.ladder is not None or stage.sweep.learning_speed) and stage.out not in ladders_written:
            write_ladder(stage.out, stage.sweep.name, stage.sweep.ladder, stage.sweep.learning_speed)
            ladders_written.add(stage.out)
        runs = [(folder, planned.config) for folder, planned in stage.planned]
        tokens = {planned.config.run_id(): planned.batch_size * planned.seq_len for _, planned in stage.planned}
        pending = [(folder, config) for folder, config in runs if not is_finished(folder / config.run_id())]
        if executor == "local":
            check_threads_fit([c for _, c in pending], share, workers)
        every.extend(runs)
        name = stage.sweep.name
        if name not in progresses:
            progresses[name] = Progress(name, len(runs), len(runs) - len(pending), stream, peers)
            known[name] = 0
        else:
            progresses[name].grow(0 if name in announced else len(runs), len(runs) - len(pending))
        known[name] += len(runs)
        folders.setdefault(name, stage.out)
        progress = progresses[name]
        jobs: list[Job]
        if stage.seed_parallel > 1:
            jobs = [(_run_group, ([c.to_dict() for c in configs], str(folder), stage.batching,
                                  stage.rivals.get(configs[0].run_id())),
                     [(folder, c) for c in configs], progress)
                    for folder, configs in seed_groups(pending, stage.seed_parallel)]
        else:
            jobs = [(_run_one, (c.to_dict(), str(folder)), [(folder, c)], progress) for folder, c in pending]
        for job in jobs:
            queue.push(job, stage.priority, tokens[job[2][0][1].run_id()])

    def report(job: Job, results: list[dict] | dict) -> None:
        summaries = results if isinstance(results, list) else [results]
        for summary in summaries:
            job[3].update(summary)
        for stage in follow([s["run_id"] for s in summaries]) if follow else []:
            add(stage)
        headers()

    with stop_signals() as received:
        try:
            for stage in stages:
                add(stage)
            if follow:  # stages whose runs had all finished before may unlock others now
                for stage in follow([]):
                    add(stage)
            headers()
            if executor == "ray":
                _run_ray(queue, report, ray_options or {})
            elif workers <= 1:
                while queue:  # grows as runs unlock others
                    job = queue.pop()
                    report(job, job[0](*job[1]))
            else:
                _run_local(queue, workers, share, report)
        except KeyboardInterrupt:
            signum = received[0] if received else signal.SIGINT
            finished = sum(is_finished(folder / c.run_id()) for folder, c in every)
            where = ", ".join(str(s.out) for s in stages)
            line = (f"[{stages[0].sweep.name}] stopped by {signal.Signals(signum).name}: {finished} of {len(every)} "
                    f"runs finished, their results kept in {where}; the other {len(every) - finished} (those that "
                    f"were running among them) are left unfinished: rerun the same command to resume")
            print(line, file=stream, flush=True)
            raise SweepStopped(signum, line) from None
    counts: dict[str, Any] = {name: {"total": p.total, "skipped": p.skipped, **p.counts}
                              for name, p in progresses.items()}
    started = peers[0].started if peers else time.perf_counter()
    counts["wall_seconds"] = round(time.perf_counter() - started, 1)
    return counts


def _run_ray(queue: JobQueue, report: Callable[[Job, Any], None], ray_options: dict) -> None:
    """The queued jobs on Ray, one batch of what is known after another (a Ray batch runs what it is given)."""
    from emergence_bench.execution.ray_executor import run_on_ray

    while queue:
        batch = [queue.pop() for _ in range(len(queue))]
        by_run = {config.run_id(): job for job in batch for _, config in job[2]}
        run_on_ray([run for job in batch for run in job[2]],
                   lambda summary: report(by_run[summary["run_id"]], summary), **ray_options)


def _run_local(queue: JobQueue, workers: int, share: int, report: Callable[[Job, Any], None]) -> None:
    """The queued jobs on ``workers`` local processes (see emergence_bench.execution.workers), each
    result reported as it comes (a report may queue more jobs). A worker is given the queue's first
    job only when it is free, so a job queued later can still go before those queued earlier. A job
    whose worker died is reported lost (its started runs get a failed row saying so) and the rest go
    on; a results folder that cannot be written stops them all."""
    pool = Workers(workers, _init_worker, (share,))
    started: list[Job] = []
    calls: list[tuple[Callable, tuple]] = []  # the pool's list: one more each time a worker is free
    ended = 0

    def feed() -> None:
        while queue and len(started) - ended < workers:
            started.append(queue.pop())
            calls.append((started[-1][0], started[-1][1]))

    try:
        feed()
        for index, result in pool.results(calls):
            ended += 1
            if isinstance(result, ResultsUnwritable):
                raise result
            if isinstance(result, BaseException):
                report(started[index], _lost(started[index][2], result))
            else:
                report(started[index], result)
            feed()
    finally:
        pool.stop()


def _lost(runs: list[tuple[Path, RunConfig]], error: BaseException) -> list[dict]:
    """The summaries of a job's runs that ended without their own report: a run whose worker died
    mid-run gets a failed row saying so (``record_lost``); a run that finished keeps its row, and a run
    interrupted by a signal to its worker (or failed by an error outside it) none."""
    from emergence_bench.engine.run_folder import record_lost

    summaries = []
    for run_out, config in runs:
        row: Row | None = None
        if isinstance(error, WorkerLost):
            row = record_lost(config, run_out, f"WorkerLost: {error}; rerun the sweep to train it again")
        elif not isinstance(error, Interrupted):
            row = read_result(run_out / config.run_id())
        summaries.append(progress_summary(row) if row else lost_summary(config.run_id(), error))
    return summaries
