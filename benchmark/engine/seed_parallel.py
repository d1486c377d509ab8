"""Training a group of seeds of one config: batched when the model vmaps and its batching mode says
so (one of ``BATCHING_MODES``: ``always``, or ``auto`` when the probe says it pays), else one seed
after another through ``run()``. What may end the group early (a tuning's pruning) comes in as a
``GroupStop``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from emergence_bench.config import Batching, RunConfig
from emergence_bench.engine.batching_probe import batching_speedup, seed_parallel_supported
from emergence_bench.engine.group_stop import GroupStop
from emergence_bench.engine.resume_point import (
    Point,
    ResumePoints,
    compared,
    environment,
    new_header,
    read_point,
    refuse,
)
from emergence_bench.engine.run import RunPlan, apply_threads, plan, run
from emergence_bench.engine.run_folder import EndedFolder, RunBusy, failure
from emergence_bench.engine.seed_stack import SeedBatches, SeedStack
from emergence_bench.engine.seed_views import Seed, SeedCallbacks
from emergence_bench.engine.trainer import build_trainer, quiet_lightning
from emergence_bench.machine.allocator import keep_freed_memory
from emergence_bench.registry import Registry
from emergence_bench.results.row import Row
from emergence_bench.results.store import FINISHED, busy_row, read_result


class BatchingMode(Protocol):
    """How a group of ``k`` seeds of the planned config, whose model vmaps, chooses to train
    (``--batching``): ``(None, probe)`` to batch it, else ``(why not, probe)``; ``probe`` is what its
    rows record of the choice (a measured speed-up)."""

    def __call__(self, planned: RunPlan, k: int) -> tuple[str | None, dict[str, float]]: ...


BATCHING_MODES: Registry[BatchingMode] = Registry("batching mode", BatchingMode)
PAYS = 1.1  # auto batches a group when its probe measures it at least this much faster than one by one


@BATCHING_MODES.register("auto")
def auto(planned: RunPlan, k: int) -> tuple[str | None, dict[str, float]]:
    """Batched where a short probe (``batching_speedup``) measures it ``PAYS`` times faster here."""
    if k < 2:
        return None, {}
    speedup = batching_speedup(planned, k)
    probe = {"probe": round(speedup, 3)}
    if speedup < PAYS:
        return f"auto: batching {k} seeds measured {speedup:.2f}× one by one here", probe
    return None, probe


@BATCHING_MODES.register("always")
def always(planned: RunPlan, k: int) -> tuple[str | None, dict[str, float]]:
    """Batched whenever the model vmaps."""
    return None, {}


BATCHING: tuple[str, ...] = tuple(BATCHING_MODES)  # config.Batching's values, in its order


def run_seed_parallel(given: Sequence[dict | RunConfig | RunPlan], out: str | Path, progress: bool = False,
                      batching: Batching = "always", unfinished_only: bool = False,
                      stop: GroupStop | None = None) -> list[Row]:
    """Train the seeds of ``given`` configs (identical but for ``seed``; each planned here, unless its
    plan is given) together; returns their rows.

    Each seed's row is written to ``out/<run_id>/result.json`` with the run id and schema of
    ``emergence_bench.engine.run.run`` plus ``"seed_parallel"``: ``{"k": K, "group": [run ids]}`` when batched,
    ``{"k": 1, "fallback": reason}`` when the model cannot be vmapped and the seeds ran one by one.
    With ``batching="auto"`` a short probe (``batching_speedup``) first measures whether batching
    pays here and now; the group is batched only when it does (by ``PAYS``), and the measured
    speed-up is recorded either way (``"probe"``).
    A NaN loss ends only its seed (``diverged``); a callback error only its seed (``failed``); an
    error in the shared step fails every seed still training. Ctrl-C raises KeyboardInterrupt and
    leaves unfinished seeds without a row, so a resumed sweep reruns them. A seed another process
    holds (``RunBusy``, see emergence_bench.engine.run_folder.RunLock; with ``unfinished_only`` also one it has
    finished) is left to it: its row here is ``busy_row``'s, written nowhere.
    ``stop`` (a tuning point's pruning, emergence_bench.execution.pruning.Rivals) is asked after each
    eval of a batched group whose runs it judges (``GroupStop.judges``), and may end it there.
    A batched group saves a resume point every ``trainer.resume_every_s`` seconds of training
    (emergence_bench.engine.resume_point); when ``given`` are the runs a point continues, the group
    goes on from it, its ended seeds back in their slots, without a probe, and writes the rows it
    would have written in one piece.
    """
    if batching not in BATCHING_MODES:
        raise ValueError(f"seed-parallel batching must be one of {', '.join(BATCHING)}, got {batching!r}")
    plans = [plan(c) for c in given]  # each checked and sized once
    configs = [p.config for p in plans]
    if not configs:
        return []
    _check_group(configs)
    # K seeds' activations are large blocks: reused, not page-faulted afresh each step (unless opted out)
    keep_freed_memory(configs[0].trainer.keep_freed_memory)
    point, _ = _group_point(plans, Path(out), whole=False)  # before the runs' locks: it decides how it trains
    supported, reason = (True, None) if point is not None else seed_parallel_supported(plans[0])
    probe: dict[str, float] = {}
    if supported and point is None:
        why_not, probe = BATCHING_MODES[batching](plans[0], len(plans))
        if why_not is not None:
            supported, reason = False, why_not
    if not supported:
        rows: list[Row] = []
        for config, planned in zip(configs, plans):
            try:
                rows.append(run(planned, out, progress=progress, unfinished_only=unfinished_only,
                                extra={"seed_parallel": {"k": 1, "fallback": reason, **probe}}))
            except RunBusy as error:
                rows.append(busy_row(config.run_id(), error))
        return rows
    # the thread policy, sized for K models (a point's K: its ended seeds keep their slots)
    apply_threads(plans[0], seeds=len(point.runs) if point is not None else len(configs))
    quiet_lightning()
    note = (point.header["note"] if point is not None
            else {"seed_parallel": {"k": len(configs), "group": [c.run_id() for c in configs], **probe}})
    seeds: list[Seed] = []
    busy: list[Row] = []
    for planned in plans:
        try:
            seeds.append(Seed(planned, Path(out), note, unfinished_only))
        except RunBusy as error:
            busy.append(busy_row(planned.config.run_id(), error))
    point = _held_point(plans, Path(out)) if not busy else None  # again: no other process may write it now
    for seed in seeds:
        seed.folder.start(point)
    built: list[Seed] = []
    for seed in seeds:
        try:
            seed.build(progress)
            built.append(seed)
        except Exception as error:
            seed.finish("failed", failure(error))
    judged = set(point.runs) if point is not None else {s.config.run_id() for s in seeds}
    if stop is not None and not stop.judges(judged):
        stop = None
    if built:
        _train(built, configs[0], Path(out), note, stop, point)
    return [s.folder.record for s in seeds] + busy


def _group_point(plans: list[RunPlan], out: Path, whole: bool = True) -> tuple[Point | None, str | None]:
    """The resume point that continues exactly these runs as a group, checked (its configs, the
    code and machine, its ended runs' rows), or (None, why not) when it cannot be used, or (None,
    None) when there is none (``whole``: see read_point). Sets the threads for the point's K (the
    environment includes them)."""
    configs = [p.config for p in plans]
    point, why = read_point(out, [c.run_id() for c in configs], whole)
    if point is None:
        return None, why
    apply_threads(plans[0], seeds=len(point.runs))
    why = point.mismatch("group", configs, environment(configs[0].trainer.accelerator))
    for run_id in [r for r in point.runs if r not in point.live] if why is None else []:
        row = read_result(out / run_id)
        if row is None or row["status"] not in FINISHED:
            why = f"{run_id}, which ended before it, has no finished row"
            break
    return (point, None) if why is None else (None, why)


def _held_point(plans: list[RunPlan], out: Path) -> Point | None:
    """``_group_point``, read again once this process holds every run's lock (another process may have
    saved a later point meanwhile); one it cannot use is refused (a line, and removed)."""
    point, why = _group_point(plans, out)
    if why is not None:
        refuse(out, [p.config.run_id() for p in plans], why)
    return point


def _slots(point: Point, live: list[Seed], out: Path) -> list[Seed]:
    """The group's seeds in the point's slots: ``live`` and, in the others, the seeds that ended before
    it (their rows on disk; each built again, so that its slot holds what it held)."""
    by_id = {s.config.run_id(): s for s in live}
    for run_id, data in zip(point.runs, point.header["configs"]):
        if run_id not in by_id:
            row = read_result(out / run_id)
            if row is None:
                raise RuntimeError(f"run {run_id} of the resume point {point.path} has no row")
            by_id[run_id] = Seed(plan(data), out, {}, ended=row)
            by_id[run_id].build(progress=False)
    return [by_id[run_id] for run_id in point.runs]


def _train(seeds: list[Seed], config: RunConfig, out: Path, note: dict, stop_group: GroupStop | None = None,
           point: Point | None = None) -> None:
    """Fit the group with the suite's Trainer, from ``point`` when given, saving resume points (whose
    rows carry ``note``) as it goes; an error in the shared step fails every live seed."""
    points: ResumePoints | None = None
    try:
        if point is not None:
            seeds = _slots(point, seeds, out)
        tasks, models = zip(*(s.built for s in seeds))
        stack = SeedStack(list(models), tasks[0], config.optim, config.trainer.max_steps,
                          config.trainer.train_on, config.trainer.log_every, config.trainer.batch_order)
        for k, seed in enumerate(seeds):
            seed.join(stack, k)
            if isinstance(seed.folder, EndedFolder):
                seed.live = False
        group = SeedCallbacks(stack, seeds, stop_group)
        started = {s.config.run_id(): s.folder.record["started_at"] for s in seeds}
        header = new_header("group", [s.config.run_id() for s in seeds], [compared(s.config) for s in seeds],
                            environment(config.trainer.accelerator), started, note, point)
        points = ResumePoints(out, config.trainer.resume_every_s, header,
                              lambda: [s.config.run_id() for s in seeds if not s.folder.done], group.ready, point,
                              lambda: [s.logger for s in seeds if s.live and s.logger is not None])
        trainer = build_trainer(config, [group, points], logger=False, root_dir=out)
        trainer.fit(stack, SeedBatches(list(tasks)), ckpt_path=None if point is None else point.path,
                    weights_only=True)
    except SystemExit:  # Lightning turns Ctrl-C into exit(1) after a graceful shutdown
        raise KeyboardInterrupt("seed-parallel group interrupted") from None
    except Exception as error:
        for seed in seeds:
            if not seed.folder.done:
                seed.finish("failed", failure(error))
    for seed in seeds:
        if not seed.folder.done:
            seed.finish("ok", None)
    if points is not None:
        points.discard()  # every run has its row


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
