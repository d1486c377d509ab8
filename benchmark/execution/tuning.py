"""The tuning protocol: each mixer's learning rate (or any tuning key) chosen per task family, on
tuning seeds, by one rule, before the mixer is ranked.

A ranking preset says, beside its ladder (see ``benchmark/presets/standard-cpu.yaml``)::

    tuning:
      seeds: [100, 101, 102, 103]                   # disjoint from the ranking's seeds
      seed_parallel: 4
      rung: middle                                  # each group's middle rung, or `all` its rungs
      grid: {optim.lr: [3.0e-4, 1.0e-3, 3.0e-3, 1.0e-2]}
      widen: 2                                      # at most this many grid steps past an edge
    tuned:                                          # the frozen choice: mixer -> group -> values
      transformer: {linear-map: {optim.lr: 1.0e-3}, ...}

A mixer the ``tuned`` map lacks (a plugin) is tuned first: its tuning runs go under
``DIR/tuning/<group>/`` and resume like any sweep's, and its ranking runs use the chosen values.

**The choice rule** (execution/choice_rule.py), per (mixer, group) over the grid's points: the
highest success area (the mean success rate over the tuning rungs; a diverged run counts as not
emerged, a failed one is left out), then the lowest Kaplan–Meier median emergence step (not reached
is worst), then the smaller values (the grid's keys in order). A point on the edge of a positive,
numeric axis that is *strictly* better than its inner neighbour (area or median, not only the
tie-break) says the best may lie beyond it: the grid grows one step (the edge's own ratio) that way,
up to ``widen`` times, and a choice still on an edge after that is flagged ``edge`` in the tuning
table.

**Pruning** (``tuning.prune``, on by default): the points train in ``middle_first``'s order (every
job's middle point before any job's next), and a point's runs stop at the first eval where even
their best case is strictly worse than a finished point's merit (execution/pruning.py). The choice,
its edges and the "none works" flag are then what the full budget would give; the tuning table marks
each pruned point (``pruned``), whose area and median are those it had reached.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emergence_bench.config import ConfigError, resolve
from emergence_bench.execution.choice_rule import choose, edges, measure, widened
from emergence_bench.execution.pruning import Rivals
from emergence_bench.execution.sweep_spec import Group, Sweep
from emergence_bench.results.row import ResultRow
from emergence_bench.results.store import TUNING_DIR, is_finished, none_works, read_result, write_tables

if TYPE_CHECKING:  # the sweep module runs the stages; tuning only hands them on
    from emergence_bench.execution.sweep import Stage


# --- the tuning sweep ----------------------------------------------------------------------------
def rung_axis(group_grid: dict[str, list], group: str) -> tuple[str, list]:
    """A ranking group's ladder: its one ``task.`` grid key and the rungs. A group of one setting names
    it as a ladder of one rung (``task.sparsity: [3]``, the base's value, so no run id changes): the
    tuning table and figure say which setting the choice was made on."""
    keys = [k for k in group_grid if k.startswith("task.")]
    if len(keys) != 1:
        raise ConfigError(f"group {group!r} needs exactly one task.* grid axis (its ladder) to be tuned on, "
                          f"got {keys or 'none'}" + ("" if keys else "; a group of one setting names it as a "
                                                     "ladder of one rung, e.g. task.sparsity: [3]"))
    return keys[0], list(group_grid[keys[0]])


def tuning_rungs(rungs: list, rung: str) -> list:
    return rungs if rung == "all" else [rungs[len(rungs) // 2]]


@dataclass
class TuningJob:
    """One (mixer, group) to tune: its mixer entry, its grid (grown by widening), its runs' ids."""

    mixer: dict
    group: str
    grid: dict[str, list]
    widened: list[dict] = field(default_factory=list)  # [{key, side, value}] in the order they were added

    @property
    def name(self) -> str:
        return self.mixer["name"]


def tuning_sweep(sweep: Sweep, jobs: list[TuningJob]) -> Sweep:
    """The Sweep that trains ``jobs``' tuning runs: one group per (mixer, group), named after the group,
    so its runs go under DIR/tuning/<group>/."""
    assert sweep.tuning is not None  # a sweep that tunes (the CLI calls this only then)
    groups = []
    for job in jobs:
        group = next(g for g in sweep.groups if g.name == job.group)
        axis, rungs = rung_axis(group.grid, group.name)
        grid = {k: v for k, v in {**sweep.grid, **group.grid}.items() if k not in ("seed", "mixer", axis)}
        grid.update({axis: tuning_rungs(rungs, sweep.tuning.rung), "seed": sweep.tuning.seeds, **job.grid})
        if sweep.tuning.task_seeds is not None:  # instances of its own, apart from the ranking's
            grid["task.task_seed"] = sweep.tuning.task_seeds
        groups.append(Group(job.group, {**copy.deepcopy(group.base), "mixer": copy.deepcopy(job.mixer)}, grid,
                            copy.deepcopy(group.mixers)))
    return Sweep(name=f"{sweep.name}:tuning", base=copy.deepcopy(sweep.base), groups=groups,
                 seed_parallel=sweep.tuning.seed_parallel, batching=sweep.batching, scale=sweep.scale)


def job_table(sweep: Sweep, job: TuningJob, out: Path) -> dict:
    """The tuning table of one job from the results under ``out`` (DIR/tuning): every point measured,
    the choice and any edge. Runs not finished yet count as missing (the point is unmeasured)."""
    assert sweep.tuning is not None  # a sweep that tunes (the CLI calls this only then)
    group = next(g for g in sweep.groups if g.name == job.group)
    axis, rungs = rung_axis(group.grid, group.name)
    used = tuning_rungs(rungs, sweep.tuning.rung)
    by_point: dict[str, dict[Any, list[ResultRow]]] = {}
    for key, runs in point_runs(sweep, job).items():
        for rung, run_id in runs:
            record = read_result(out / job.group / run_id)
            if record is not None:
                by_point.setdefault(key, {}).setdefault(json.dumps(rung), []).append(record)
    points = []
    for point in itertools.product(*job.grid.values()):
        values = dict(zip(job.grid, point))
        found = by_point.get(json.dumps(values, sort_keys=True), {})
        points.append(measure(values, [found.get(json.dumps(r), []) for r in used]))
    chosen = choose(points)
    edge = edges(points, chosen)
    table = {"mixer": job.name, "group": job.group, "family": group.base.get("task", {}).get("name", job.group),
             "rung_axis": axis, "rungs": used, "seeds": sweep.tuning.seeds, "grid": job.grid,
             "points": [p.to_dict() for p in points], "chosen": chosen.values, "edge": edge or None,
             "widened": job.widened}
    return {**table, "none_works": none_works(table)}  # (one definition: rank and the figures read the points too)


def point_runs(sweep: Sweep, job: TuningJob) -> dict[str, list[tuple[Any, str]]]:
    """The runs the tuning sweep trains for ``job``, by grid point (its values as sorted JSON):
    [(rung, run id)]."""
    group = next(g for g in sweep.groups if g.name == job.group)
    axis, _ = rung_axis(group.grid, group.name)
    runs: dict[str, list[tuple[Any, str]]] = {}
    for _, raw in tuning_sweep(sweep, [job]).raw_runs():
        values = {key: _dotted(raw, key) for key in job.grid}
        runs.setdefault(json.dumps(values, sort_keys=True), []).append((_dotted(raw, axis), resolve(raw).run_id()))
    return runs


def middle_first(grid: dict[str, list]) -> list[dict[str, Any]]:
    """The grid's points, those nearest its middle first (the summed distance of each value's place
    from the middle of its axis), then in the grid's order: the points likeliest to be chosen train
    first and set the bar the others are pruned against (execution/pruning.py)."""
    points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    return sorted(points, key=lambda p: sum(abs(axis.index(p[k]) - (len(axis) - 1) / 2) for k, axis in grid.items()))


def _dotted(config: dict, key: str) -> Any:
    for part in key.split("."):
        config = config.get(part, {}) if isinstance(config, dict) else {}
    return config


def jobs_for(sweep: Sweep, retune: bool = False) -> list[TuningJob]:
    """The (mixer, group) pairs of ``sweep`` to tune: those its ``tuned`` map lacks (every one with
    ``retune``)."""
    assert sweep.tuning is not None  # a sweep that tunes (the CLI calls this only then)
    jobs = []
    for group in sweep.groups:
        entries = group.grid.get("mixer", sweep.grid.get("mixer", [sweep.base.get("mixer", {})]))
        for entry in entries:
            name = entry.get("name")
            if retune or group.name not in sweep.tuned.get(name, {}):
                jobs.append(TuningJob(copy.deepcopy(entry), group.name, copy.deepcopy(sweep.tuning.grid)))
    return jobs


def ranking_part(sweep: Sweep, mixer: str, group: str) -> Sweep:
    """The ranking runs of one mixer in one group of ``sweep`` (at its tuned values), run ids unchanged."""
    part = copy.deepcopy(sweep)
    part.select([group])
    part.choose_mixers([mixer])
    return part


RANKING_PRIORITY = 1_000_000  # a ranking stage's: after every place of any tuning grid (a lower is taken first)


class TuneThenRank:
    """Tuning and ranking as one stream of runs (``run_stages``'s ``follow``): every job's tuning runs
    first, and each (mixer, group)'s ranking runs as soon as its own tuning has chosen, so no worker
    waits for the slowest tuning (or a widening) to end. A job whose tuning runs have all reported
    is resolved: its grid widens past a strict edge (its new runs join the stream), or its choice is
    set in ``sweep.tuned``, its table written to DIR/tuning/tuning.json, and its ranking runs join.
    Mixers and groups not being tuned are ranked from the start at their frozen values. ``stage(sweep,
    folder, tuning)`` says how a part trains (its seeds at a time, its batching)."""

    def __init__(self, sweep: Sweep, out: Path, jobs: list[TuningJob], say: Callable[[str], None],
                 stage: Callable[[Sweep, Path, bool], Stage]) -> None:
        assert sweep.tuning is not None  # a sweep that tunes (the CLI makes this only then)
        self.sweep, self.out, self.jobs, self.say, self.stage = sweep, Path(out), jobs, say, stage
        self.folder = self.out / TUNING_DIR
        self.waiting: dict[str, tuple[str, str]] = {}  # run id -> the (mixer, group) whose choice waits for it
        self.unresolved = list(jobs)
        self.tables: list[dict] = []

    def first(self) -> list[Stage]:
        """The tuning runs of every job, then the ranking runs of every (mixer, group) not tuned here."""
        stages = self._tuning(self.jobs)
        tuned_here = {(job.name, job.group) for job in self.jobs}
        for group in self.sweep.groups:
            for entry in group.grid.get("mixer", self.sweep.grid.get("mixer", [self.sweep.base.get("mixer", {})])):
                if (entry.get("name"), group.name) not in tuned_here:
                    stages.append(self._ranking(entry.get("name"), group.name))
        return stages

    def __call__(self, finished: list[str]) -> list[Stage]:
        """The stages that the runs ``finished`` unlock ([] at the start: jobs already complete)."""
        for run_id in finished:
            self.waiting.pop(run_id, None)
        waited = set(self.waiting.values())
        ready = [job for job in self.unresolved if (job.name, job.group) not in waited]
        return [stage for job in ready for stage in self._resolve(job)]

    def _tuning(self, jobs: list[TuningJob], only: dict[str, list] | None = None) -> list[Stage]:
        """The tuning runs of ``jobs`` (with ``only``, of those grid values alone: a widening's new
        points), a stage per place in ``middle_first``'s order, taken in that order, so that every
        job's likeliest point trains before any job's next (a widening's point, at place 0, goes
        ahead of those still queued); the unfinished runs are waited for. Each point's runs carry
        their rivals (``tuning.prune``)."""
        assert self.sweep.tuning is not None
        orders = [middle_first({**job.grid, **(only or {})}) for job in jobs]
        # Each run's rivals, made once for every stage: a lookup by run id finds only its own.
        rivals = ({run_id: r for job in jobs for run_id, r in self._rivals(job).items()}
                  if self.sweep.tuning.prune else {})
        stages = []
        for place in range(max(map(len, orders), default=0)):
            parts = [TuningJob(job.mixer, job.group, {k: [v] for k, v in order[place].items()})
                     for job, order in zip(jobs, orders) if place < len(order)]
            stage = self.stage(tuning_sweep(self.sweep, parts), self.folder, True)
            stage.priority = place  # every job's likeliest point first, in every family
            stage.rivals = rivals
            for folder, planned in stage.planned:  # planned once: the sweep reads the same plans
                if not is_finished(folder / planned.config.run_id()):
                    self.waiting[planned.config.run_id()] = (planned.config.mixer.name, folder.name)
            stages.append(stage)
        return stages

    def _rivals(self, job: TuningJob) -> dict[str, Rivals]:
        """Run id -> its point's Rivals, for every run of ``job``'s grid (as it has grown): its own
        runs and every other point's."""
        folder, runs = self.folder / job.group, point_runs(self.sweep, job)
        rivals = {}
        for key, own in runs.items():
            others = [other for other in runs if other != key]
            point = Rivals(own=[str(folder / run_id) for _, run_id in own],
                           points=[[str(folder / run_id) for _, run_id in runs[other]] for other in others],
                           values=[json.loads(other) for other in others])
            rivals.update({run_id: point for _, run_id in own})
        return rivals

    def _resolve(self, job: TuningJob) -> list[Stage]:
        """``job``'s tuning has reported every run: widen its grid, or choose and rank."""
        table = job_table(self.sweep, job, self.folder)
        assert self.sweep.tuning is not None
        for key, side in (table["edge"] or {}).items():
            if len(job.widened) >= self.sweep.tuning.widen:
                break
            value = widened(job.grid[key], side)
            job.grid[key] = sorted(job.grid[key] + [value])
            job.widened.append({"key": key, "side": side, "value": value})
            self.say(f"[{self.sweep.name}:tuning] {job.name} on {job.group}: best at the {side} edge of {key}, "
                     f"grid widened to {job.grid[key]}")
            stages = self._tuning([job], only={key: [value]})
            return stages + (self._resolve(job) if (job.name, job.group) not in self.waiting.values() else [])
        self.unresolved.remove(job)
        self.tables.append(table)
        write_tables(self.folder, [table])
        self.sweep.tuned.setdefault(job.name, {})[job.group] = dict(table["chosen"])
        flag = (f" (still on the {', '.join(f'{s} edge of {k}' for k, s in table['edge'].items())})"
                if table["edge"] else "")
        if table["none_works"]:  # the tie-break's pick, never an optimum
            flag = (" — none works at any value: no tuning run emerged, so this is the tie-break's smallest "
                    "value, not an optimum")
        pruned = sum(bool(p["pruned"]) for p in table["points"])
        if pruned:  # each stopped once it could no longer be chosen
            flag += f" ({pruned} of {len(table['points'])} points pruned)"
        self.say(f"[{self.sweep.name}:tuning] {job.name} on {job.group}: chose "
                 + ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in table["chosen"].items())
                 + flag)
        return [self._ranking(job.name, job.group)]

    def _ranking(self, mixer: str, group: str) -> Stage:
        """The ranking runs of ``mixer`` in ``group``, taken after every tuning run queued."""
        stage = self.stage(ranking_part(self.sweep, mixer, group), self.out, False)
        stage.priority = RANKING_PRIORITY
        return stage
