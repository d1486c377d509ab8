"""Sweeps: a base config plus a grid over dotted keys, run by local worker processes, resumable.

A sweep file (or preset in ``benchmark/presets/``) is::

    name: quick
    description: ...
    runs: 8                                            # optional: the run count, checked on load
    base: {seed: 0, task: {...}, mixer: {...}, ...}     # a run config
    grid: {seed: [0, 1, 2], task.sparsity: [2, 3]}     # Cartesian product applied to base
    groups:                                            # optional: several experiments in one file
      - {name: ca, base: {task: {name: cellular_automata}}, grid: {task.state_size: [4, 8]}}

A group's base is merged into the sweep's base (a task or mixer with another name replaces it), its
grid extends the sweep's grid, and its runs are written under ``DIR/<group name>/``.

A ranking preset may add ``tuning:`` (how each mixer's learning rate is chosen per group) and
``tuned:`` (the frozen choices): each run then trains at its mixer's tuned values for its group, and
a mixer without them is tuned first (emergence_bench.execution.tuning).

Every run has a stable id (a hash of its resolved config), so rerunning a sweep skips the runs whose
result.json says ok or diverged, reruns failed and unfinished ones, and loses nothing finished.
"""

from __future__ import annotations

import copy
import difflib
import json
import itertools
import math
import signal
import sys
import threading
import time
from contextlib import contextmanager
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from emergence_bench.config import (Batching, ConfigError, RunConfig, TrainerConfig, check_choices, load_yaml, resolve,
                                    set_dotted)
from emergence_bench.execution.workers import Interrupted, Workers, WorkerLost
from emergence_bench.machine.threads import available_cpus, set_cpu_share
from emergence_bench.result_row import Row
from emergence_bench.results import (ResultsUnwritable, busy_row, is_finished, lost_summary, progress_summary,
                                     read_result)

PRESETS_DIR = Path(__file__).parents[1] / "presets"


def merge(base: dict, override: dict) -> dict:
    """``override`` deep-merged into a copy of ``base``; a task or mixer section with another
    ``name`` replaces the base's section instead (its parameters would not apply)."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        old = merged.get(key)
        renamed = key in ("task", "mixer") and isinstance(value, dict) and isinstance(old, dict) \
            and value.get("name", old.get("name")) != old.get("name")
        if isinstance(value, dict) and isinstance(old, dict) and not renamed:
            merged[key] = merge(old, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


Rung = Literal["middle", "all"]


@dataclass
class Tuning:
    """A preset's ``tuning:`` section (see emergence_bench.execution.tuning)."""

    seeds: list[int]
    grid: dict[str, list]
    rung: Rung = "middle"
    seed_parallel: int = 1
    widen: int = 2

    @classmethod
    def parse(cls, data: Any, where: str) -> Tuning:
        if not isinstance(data, dict):
            raise ConfigError(f"{where}tuning must be a mapping (seeds, grid, rung, seed_parallel, widen), got {data!r}")
        allowed = {"seeds", "grid", "rung", "seed_parallel", "widen"}
        if unknown := sorted(set(data) - allowed):
            raise ConfigError(f"{where}unknown tuning key(s) {', '.join(unknown)}; valid: {', '.join(sorted(allowed))}")
        seeds, grid = data.get("seeds"), data.get("grid")
        if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
            raise ConfigError(f"{where}tuning.seeds must be a non-empty list of whole numbers, got {seeds!r}")
        if not isinstance(grid, dict) or not grid or not all(isinstance(v, list) and v for v in grid.values()):
            raise ConfigError(f"{where}tuning.grid must map dotted keys to non-empty lists, got {grid!r}")
        check_distinct(f"{where}tuning.seeds", seeds)
        for key, values in grid.items():
            check_distinct(f"{where}tuning.grid.{key}", values)
        tuning = cls(seeds=seeds, grid={k: list(v) for k, v in grid.items()}, rung=data.get("rung", "middle"),
                     seed_parallel=data.get("seed_parallel", 1), widen=data.get("widen", 2))
        if tuning.rung not in ("middle", "all"):
            raise ConfigError(f"{where}tuning.rung must be middle or all, got {tuning.rung!r}")
        for name in ("seed_parallel", "widen"):
            value = getattr(tuning, name)
            if not isinstance(value, int) or value < (1 if name == "seed_parallel" else 0):
                raise ConfigError(f"{where}tuning.{name} must be a whole number, got {value!r}")
        return tuning


def parse_tuned(data: Any, where: str) -> dict[str, dict[str, dict[str, Any]]]:
    """A preset's ``tuned:`` map, checked: mixer name -> group name -> {dotted key: value}."""
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(g, dict) and all(isinstance(v, dict) for v in g.values())
                                             for g in data.values()):
        raise ConfigError(f"{where}tuned must map mixer -> group -> {{dotted key: value}}, got {data!r}")
    return copy.deepcopy(data)


@dataclass
class Group:
    name: str
    base: dict = field(default_factory=dict)
    grid: dict[str, list] = field(default_factory=dict)


@dataclass
class Sweep:
    name: str
    base: dict
    grid: dict[str, list] = field(default_factory=dict)
    description: str = ""
    groups: list[Group] = field(default_factory=list)
    advertised: int | None = None  # the `runs:` count a preset promises
    seed_parallel: int = 1  # how a sweep file says to train it by default (the CLI flags override)
    batching: Batching = "auto"
    scale: float = 1.0  # multiplies every run's trainer.max_steps and trainer.eval_every
    ladder: str | None = None  # the frozen ladder's version, which shipped reference results name
    tuning: Tuning | None = None  # how a mixer's values are chosen per group (execution/tuning.py)
    tuned: dict[str, dict[str, dict]] = field(default_factory=dict)  # mixer -> group -> {dotted key: value}

    def raw_runs(self) -> list[tuple[str, dict]]:
        """Every run as (group name, or "" without groups; raw config), at its mixer's tuned values."""
        runs = []
        for group in self.groups or [Group("")]:
            base, grid = merge(self.base, group.base), {**self.grid, **group.grid}
            for values in itertools.product(*grid.values()):
                config = copy.deepcopy(base)
                for key, value in zip(grid, values):
                    set_dotted(config, key, copy.deepcopy(value))
                if self.tuning is not None:
                    for key, value in self.tuned_values(config.get("mixer", {}).get("name"), group.name).items():
                        set_dotted(config, key, copy.deepcopy(value))
                if self.scale != 1.0:
                    self._rescale(config)
                runs.append((group.name, config))
        return runs

    def count(self) -> int:
        """How many runs the sweep expands to (known before any tuning has chosen their values)."""
        return sum(math.prod(len(v) for v in {**self.grid, **g.grid}.values()) for g in self.groups or [Group("")])

    def tuned_values(self, mixer: str | None, group: str) -> dict:
        """The tuned values of ``mixer`` in ``group``; ConfigError when it has none (tune it first)."""
        values = self.tuned.get(mixer or "", {}).get(group)
        if values is None:
            raise ConfigError(f"mixer {mixer!r} has no tuned values for group {group!r} of {self.name}: "
                              f"`emergence-bench sweep {self.name}` tunes it first")
        return values

    def untune(self, key: str) -> None:
        """Stop tuning ``key`` (the user set it for every run): drop it from the tuning grid and the
        tuned values; with nothing left to tune, the sweep is an untuned one."""
        if self.tuning is None or key not in self.tuning.grid:
            return
        del self.tuning.grid[key]
        for groups in self.tuned.values():
            for values in groups.values():
                values.pop(key, None)
        if not self.tuning.grid:
            self.tuning = None

    def _rescale(self, config: dict) -> None:
        trainer = config.setdefault("trainer", {})
        defaults = TrainerConfig()
        for key in ("max_steps", "eval_every"):
            trainer[key] = max(1, round(trainer.get(key, getattr(defaults, key)) * self.scale))

    def runs(self) -> list[tuple[str, RunConfig]]:
        """Every run resolved and checked (a bad grid point fails here, before any run)."""
        from emergence_bench.run import check

        return [(group, check(raw)) for group, raw in self.raw_runs()]

    def select(self, names: list[str]) -> None:
        """Keep only the named groups."""
        known = [g.name for g in self.groups]
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ConfigError(f"unknown group(s) {', '.join(unknown)} in sweep {self.name!r}; "
                              f"groups: {', '.join(known) or '(none)'}")
        self.groups = [g for g in self.groups if g.name in names]

    def choose_mixers(self, names: list[str]) -> None:
        """Train exactly the named mixers (``--mixers``): a mixer grid axis keeps its entries of these
        names, in this order, and a name it lacks joins with its defaults (a plugin joining a ranking);
        without a mixer axis, one is made. Run ids of the mixers kept are unchanged, so a finished
        sweep reruns nothing but the new mixers."""
        if not names or len(set(names)) != len(names):
            raise ConfigError(f"--mixers takes distinct mixer names, comma-separated, got {','.join(names)!r}")
        grids = [grid for grid in [self.grid] + [g.grid for g in self.groups] if "mixer" in grid]
        if not grids:
            grids = [self.grid]
            self.grid["mixer"] = [self.base.get("mixer") or {}]
        for grid in grids:
            known = {entry.get("name"): entry for entry in grid["mixer"] if isinstance(entry, dict)}
            grid["mixer"] = [copy.deepcopy(known.get(name, {"name": name})) for name in names]

    def override(self, overrides: dict) -> None:
        """Apply command-line ``--dotted.key value`` pairs: a grid axis is narrowed to the value(s)
        given, any other key is set on the base (and on each group's base that sets it)."""
        for key, value in overrides.items():
            self.untune(key)
            narrowed = False
            for grid in [self.grid] + [g.grid for g in self.groups]:
                if key in grid:
                    grid[key] = value if isinstance(value, list) else [value]
                    check_distinct(f"--{key}", grid[key])
                    narrowed = True
            if not narrowed:
                set_dotted(self.base, key, value)
                for group in self.groups:
                    set_dotted(group.base, key, value)


def presets() -> dict[str, Path]:
    return {p.stem: p for p in sorted(PRESETS_DIR.glob("*.yaml"))}


def load_sweep(preset_or_file: str) -> Sweep:
    """A preset name (see ``presets()``) or the path of a sweep YAML file."""
    path = Path(preset_or_file)
    if not path.is_file():
        known = presets()
        if preset_or_file not in known:
            close = difflib.get_close_matches(preset_or_file, list(known), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"no sweep file or preset named {preset_or_file!r}.{hint} "
                              f"Presets: {', '.join(known)}")
        path = known[preset_or_file]
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping (name, base, grid, groups), got {type(data).__name__}")
    if data.get("base") is not None and not isinstance(data["base"], dict):
        raise ConfigError(f"base in {path} must be a run config (a mapping), got {data['base']!r}")
    allowed = {"name", "description", "runs", "base", "grid", "groups", "seed_parallel", "batching", "ladder",
               "tuning", "tuned"}
    for key in data:
        if key not in allowed:
            raise ConfigError(f"unknown sweep key {key!r} in {path}; valid keys: {', '.join(sorted(allowed))}")
    groups = []
    for i, group in enumerate(_group_list(data.get("groups"), path)):
        extra = set(group) - {"name", "base", "grid"}
        if "name" not in group or extra:
            raise ConfigError(f"groups[{i}] in {path} needs a name and may have base and grid; "
                              f"got keys {sorted(group)}")
        groups.append(Group(group["name"], group.get("base") or {}, _grid(group.get("grid"), path)))
    sweep = Sweep(name=data.get("name", path.stem), base=data.get("base") or {}, grid=_grid(data.get("grid"), path),
                  description=data.get("description", ""), groups=groups, advertised=data.get("runs"),
                  seed_parallel=data.get("seed_parallel", 1), batching=data.get("batching", "auto"),
                  ladder=data.get("ladder"), tuned=parse_tuned(data.get("tuned"), f"{path}: "),
                  tuning=Tuning.parse(data["tuning"], f"{path}: ") if data.get("tuning") is not None else None)
    if not isinstance(sweep.seed_parallel, int) or sweep.seed_parallel < 1:
        raise ConfigError(f"{path}: seed_parallel must be a whole number ≥ 1, got {sweep.seed_parallel!r}")
    check_choices(sweep, f"{path}: ")
    if sweep.tuning is not None:
        _check_tuned(sweep, path)
    if sweep.advertised is not None and sweep.count() != sweep.advertised:
        raise ConfigError(f"{path} says runs: {sweep.advertised} but expands to {sweep.count()}")
    return sweep


def _check_tuned(sweep: Sweep, path: Path) -> None:
    """A tuned map that names only the sweep's groups and the tuning grid's keys."""
    groups = {g.name for g in sweep.groups}
    keys = set(sweep.tuning.grid) if sweep.tuning else set()
    if not groups:
        raise ConfigError(f"{path}: tuning needs groups (each a ladder with one task.* grid axis)")
    for mixer, by_group in sweep.tuned.items():
        for group, values in by_group.items():
            if group not in groups:
                raise ConfigError(f"{path}: tuned.{mixer}.{group}: no group {group!r}; groups: {', '.join(sorted(groups))}")
            if set(values) != keys:
                raise ConfigError(f"{path}: tuned.{mixer}.{group} must set exactly the tuning grid's keys "
                                  f"({', '.join(sorted(keys))}), got {', '.join(sorted(values)) or 'none'}")


def _group_list(groups, path) -> list[dict]:
    """``groups`` as a list of {name, base, grid}: the documented list form, or a mapping from each
    group's name to its {base, grid} (the name is its key)."""
    if isinstance(groups, dict):
        listed = []
        for name, body in groups.items():
            if body is not None and not isinstance(body, dict):
                raise ConfigError(f"groups.{name} in {path} must be a mapping with base and/or grid, got {body!r}")
            listed.append({"name": name, **(body or {})})
        return listed
    if groups is not None and not isinstance(groups, list):
        raise ConfigError(f"groups in {path} must be a list of {{name, base, grid}} (or a mapping from name to "
                          f"{{base, grid}}), got {type(groups).__name__}")
    for i, group in enumerate(groups or []):
        if not isinstance(group, dict):
            raise ConfigError(f"groups[{i}] in {path} must be a mapping with a name, got {group!r}")
    return groups or []


def _grid(grid, path) -> dict[str, list]:
    if grid is not None and not isinstance(grid, dict):
        raise ConfigError(f"grid in {path} must be a mapping from dotted keys to lists of values, got {grid!r}")
    grid = dict(grid or {})
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"grid.{key} in {path} must be a non-empty list, got {values!r}")
        check_distinct(f"grid.{key} in {path}", values)
    return grid


def check_distinct(where: str, values: list) -> None:
    """ConfigError naming the first value of ``values`` given twice: a repeated grid value would
    count one run twice (it has one run id)."""
    seen = set()
    for value in values:
        canonical = json.dumps(value, sort_keys=True, default=str)
        if canonical in seen:
            raise ConfigError(f"{where}: the value {value!r} is given twice (one run cannot be counted twice)")
        seen.add(canonical)


# --- execution --------------------------------------------------------------------------------
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # a scheduler's stop, Ctrl-C, a closed terminal


class SweepStopped(KeyboardInterrupt):
    """A sweep stopped by a signal of STOP_SIGNALS, its workers stopped and its line printed;
    ``exit_code`` is 128 + the signal's number (143 for SIGTERM, 130 for SIGINT, 129 for SIGHUP),
    as a shell reports a process that signal ended."""

    def __init__(self, signum: int, line: str):
        super().__init__(line)
        self.signum, self.exit_code = signum, 128 + signum


@contextmanager
def stop_signals():
    """While the sweep runs: the first signal of STOP_SIGNALS raises KeyboardInterrupt in the driver
    (which stops the workers), and any later one is only noted, so the stopping is not cut short.
    Yields the list of the signals received. Off the main thread (where Python takes no signals), nothing."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handler(signum, frame):
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

    def __init__(self, name: str, total: int, skipped: int, stream=None):
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


def run_sweep(sweep: Sweep, out: str | Path, workers: int = 1, stream=None, executor: str = "local",
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

    def report(results) -> None:
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


def _run_local(jobs: list, workers: int, share: int, report) -> None:
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
