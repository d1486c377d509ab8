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
from emergence_bench.engine.run import RunPlan, apply_threads, plan, run
from emergence_bench.engine.run_folder import RunBusy, failure
from emergence_bench.engine.seed_stack import SeedBatches, SeedStack
from emergence_bench.engine.seed_views import Seed, SeedCallbacks
from emergence_bench.engine.trainer import build_trainer, quiet_lightning
from emergence_bench.machine.allocator import keep_freed_memory
from emergence_bench.registry import Registry
from emergence_bench.results.row import Row
from emergence_bench.results.store import busy_row


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
    supported, reason = seed_parallel_supported(plans[0])
    probe: dict[str, float] = {}
    if supported:
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
    apply_threads(plans[0], seeds=len(configs))  # the thread policy, sized for K models
    quiet_lightning()
    note = {"seed_parallel": {"k": len(configs), "group": [c.run_id() for c in configs], **probe}}
    seeds: list[Seed] = []
    busy: list[Row] = []
    for planned in plans:
        try:
            seeds.append(Seed(planned, Path(out), note, unfinished_only))
        except RunBusy as error:
            busy.append(busy_row(planned.config.run_id(), error))
    built: list[Seed] = []
    for seed in seeds:
        try:
            seed.build(progress)
            built.append(seed)
        except Exception as error:
            seed.finish("failed", failure(error))
    if stop is not None and not stop.judges({s.config.run_id() for s in seeds}):
        stop = None
    if built:
        _train(built, configs[0], Path(out), stop)
    return [s.folder.record for s in seeds] + busy


def _train(seeds: list[Seed], config: RunConfig, out: Path, stop_group: GroupStop | None = None) -> None:
    """Fit the group with the suite's Trainer; an error in the shared step fails every live seed."""
    try:
        tasks, models = zip(*(s.built for s in seeds))
        stack = SeedStack(list(models), tasks[0], config.optim, config.trainer.max_steps,
                          config.trainer.train_on, config.trainer.log_every, config.trainer.batch_order)
        for k, seed in enumerate(seeds):
            seed.join(stack, k)
        trainer = build_trainer(config, [SeedCallbacks(stack, seeds, stop_group)], logger=False, root_dir=out)
        trainer.fit(stack, SeedBatches(list(tasks)))
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
