"""`emergence-bench sweep`: a preset or sweep file with local workers (or Ray), resuming where it
stopped; with ``--dry-run`` or ``--print-config``, only the runs it would train."""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from emergence_bench.commands.arguments import (
    BATCHING_HELP,
    CONFIG_FLAGS,
    THREADS_HELP,
    check_workers,
    config_overrides,
    finite,
    results_folder,
    threads,
)
from emergence_bench.commands.command import Subparsers, register_command
from emergence_bench.config import Batching, ConfigError, set_dotted

if TYPE_CHECKING:
    from emergence_bench.execution.sweep_spec import Sweep


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("sweep", allow_abbrev=False,
                                   help="run a preset or sweep file with local workers; resumes where it stopped",
                                   description="Run every run of a preset (`sweep --list`) or sweep file, skipping "
                                               "those already finished in --out. A config key given as a flag sets "
                                               "it in every run. " + CONFIG_FLAGS)
    parser.add_argument("sweep", nargs="?", help="preset name or sweep YAML file")
    parser.add_argument("--out", help="results directory (default: runs/<sweep name>)")
    parser.add_argument("--workers", type=int, default=1, help="parallel worker processes (default 1)")
    parser.add_argument("--threads", type=threads, metavar="N|auto",
                        help=THREADS_HELP + "; workers × threads must fit the cores")
    parser.add_argument("--executor", choices=("local", "ray"), default="local",
                        help="local worker processes (default) or one Ray task per run")
    parser.add_argument("--address", help="Ray cluster address (default: start a local Ray instance)")
    parser.add_argument("--num-cpus", type=finite, default=1, help="CPUs per run on Ray (default 1)")
    parser.add_argument("--num-gpus", type=finite, default=0, help="GPUs per run on Ray, may be fractional (default 0)")
    parser.add_argument("--max-retries", type=int, default=3, help="Ray retries of a run whose worker died")
    parser.add_argument("--seed-parallel", type=int, metavar="K",
                        help="train up to K seeds of the same config together (local executor; default: the "
                             "sweep file's seed_parallel, else 1)")
    parser.add_argument("--batching", choices=get_args(Batching),
                        help=BATCHING_HELP + " (default: the sweep file's batching, else auto)")
    parser.add_argument("--group", help="run only these groups of the sweep (comma-separated)")
    parser.add_argument("--mixers", help="train exactly these mixers (comma-separated): the sweep's own settings "
                                         "for the ones it has; any other (e.g. a plugin) at its constructor's "
                                         "defaults, its learning rate tuned first where the preset tunes "
                                         "(standard-cpu: into DIR/tuning); a --mixer.KEY flag sets KEY on each of them")
    parser.add_argument("--scale", type=finite, default=1.0,
                        help="multiply every run's max_steps and eval_every (e.g. 0.1 for a CPU-sized try)")
    parser.add_argument("--grid", action="append", metavar="KEY=V1,V2",
                        help="a grid axis from the command line (repeatable), e.g. optim.lr=1e-3,3e-3; "
                             "it replaces the sweep's axis or value for that key")
    parser.add_argument("--forecast-stop", metavar="MODEL",
                        help="end each run that a saved forecast (`forecast --save`) gives less than --risk of "
                             "emerging within its budget; its row says forecast-stopped")
    parser.add_argument("--risk", type=finite, default=0.05,
                        help="with --forecast-stop: the forecast probability of emerging below which a run stops "
                             "(default 0.05)")
    parser.add_argument("--dry-run", action="store_true", help="list the run ids and exit")
    parser.add_argument("--print-config", action="store_true",
                        help="print each run's resolved config (one YAML document per run) and exit")
    parser.add_argument("--list", action="store_true", help="list the presets with their run counts")
    parser.add_argument("--retune", action="store_true",
                        help="tune every mixer of a tuned preset again (into DIR/tuning), not only those without "
                             "frozen values, and rank them at the new choices (a flag or --grid that sets a tuned "
                             "key conflicts with it)")
    return parser


def main(args: argparse.Namespace, extra: list[str]) -> int:
    from emergence_bench.config import SECTIONS, resolve_sections

    fixed: dict = {}  # the flags' fixed-section keys, checked before the sweep's machinery loads
    for key, value in config_overrides(extra).items():
        if key.split(".")[0] in SECTIONS:
            set_dotted(fixed, key, value)
    resolve_sections(fixed)

    from emergence_bench.execution import tuning
    from emergence_bench.execution.sweep import Stage, clock, run_stages
    from emergence_bench.execution.sweep_spec import load_sweep, presets

    if args.list:
        for name in presets():
            sweep = load_sweep(name)
            groups = ", ".join(f"{g.name}" for g in sweep.groups)
            print(f"{name}  {sweep.count()} runs  {sweep.description}".rstrip()
                  + (f"\n    groups: {groups}" if groups else ""))
        return 0
    if not args.sweep:
        raise ValueError("give a preset name or sweep file (see `emergence-bench sweep --list`)")
    if Path(args.sweep).is_dir():
        raise ValueError(f"{args.sweep} is a folder: give a preset name (`emergence-bench sweep --list`) or a sweep "
                         "YAML file")
    if args.executor == "local":
        check_workers(args.workers)
    sweep = load_sweep(args.sweep)
    if args.group is not None:
        names = [g.strip() for g in args.group.split(",") if g.strip()]
        if not names:
            raise ValueError(f"--group takes group names, comma-separated, got {args.group!r}; leave it out for "
                             "every group")
        sweep.select(names)
    if args.mixers is not None:  # `--mixers ,` is refused by choose_mixers, not taken for every mixer
        sweep.choose_mixers([m.strip() for m in args.mixers.split(",") if m.strip()])
    overrides = config_overrides(extra)
    if args.threads is not None:
        overrides["trainer.threads"] = args.threads
    axes = [grid_axis(spec) for spec in args.grid or []]
    if args.retune:
        _check_retune(sweep, [f"--{key}" for key in overrides] + [f"--grid {key}" for key, _ in axes])
    if args.forecast_stop:
        if not Path(args.forecast_stop).is_file():
            what = "a folder, not a saved forecast" if Path(args.forecast_stop).is_dir() else "no such file"
            raise ValueError(f"--forecast-stop: {args.forecast_stop} is {what} "
                             "(write one with `emergence-bench forecast DIR --save FLEET=PATH`)")
        overrides["callbacks.forecast_stop"] = {"model": str(Path(args.forecast_stop).resolve()), "risk": args.risk}
    sweep.override(overrides)
    for key, values in axes:
        _add_axis(sweep, key, values)
    _mixer_keys_on_axis(sweep, {key: value for key, value in overrides.items() if key.startswith("mixer.")})
    if args.scale <= 0:
        raise ValueError(f"--scale must be > 0, got {args.scale}")
    sweep.scale = args.scale
    jobs = tuning.jobs_for(sweep, retune=args.retune) if sweep.tuning is not None else []
    if args.dry_run or args.print_config:
        from emergence_bench.config import dump_yaml

        if jobs:  # the ranking runs of these mixers are known only once their tuning has chosen
            tuned = {job.name for job in jobs}
            names = [f"{tuning.TUNING_DIR}/{group}/{config.run_id()}"
                     for group, config in tuning.tuning_sweep(sweep, jobs).runs()]
            print("\n".join(names))
            print(f"{len(names)} tuning runs of {', '.join(sorted(tuned))}; their ranking runs follow at the "
                  "chosen values", file=sys.stderr)
            return 0
        runs = sweep.runs()
        for i, (group, config) in enumerate(runs):
            name = f"{group}/{config.run_id()}" if group else config.run_id()
            # With --print-config: one YAML document per run, its id as a comment (`run --config` takes one).
            print(f"{'---' + chr(10) if i else ''}# {name}{chr(10)}{dump_yaml(config.to_dict())}"
                  if args.print_config else name, end="" if args.print_config else "\n")
        print(f"{len(runs)} runs", file=sys.stderr)
        return 0
    out = str(results_folder(args.out or Path("runs") / sweep.name))
    ray_options = {"address": args.address, "num_cpus": args.num_cpus, "num_gpus": args.num_gpus,
                   "max_retries": args.max_retries}
    # The sweep file's own seed_parallel / batching unless the flags say otherwise (Ray trains one run a task).
    seed_parallel = args.seed_parallel if args.seed_parallel is not None else (
        sweep.seed_parallel if args.executor == "local" else 1)

    tuning_parallel = args.seed_parallel or (sweep.tuning.seed_parallel if sweep.tuning and args.executor == "local"
                                             else 1)

    def stage(this: Sweep, folder: Path, tunes: bool = False) -> Stage:  # a tuning goes before the ranking
        return Stage(this, Path(folder), tuning_parallel if tunes else seed_parallel, args.batching or this.batching,
                     priority=0 if tunes else 1)

    run = {"workers": args.workers, "executor": args.executor, "ray_options": ray_options}
    try:
        if jobs and sweep.tuning is not None:  # tuning and ranking on the same workers, neither waiting
            pipeline = tuning.TuneThenRank(sweep, Path(out), jobs,
                                           lambda line: print(line, file=sys.stderr, flush=True), stage)
            counts = run_stages(pipeline.first(), follow=pipeline, announced={sweep.name: sweep.count()}, **run)
        else:
            counts = run_stages([stage(sweep, Path(out))], **run)
    except KeyboardInterrupt as stop:  # a SweepStopped has printed what it kept, and carries 128 + its signal
        if not hasattr(stop, "exit_code"):
            print(f"\ninterrupted: finished results are kept in {out}; rerun the same command to resume",
                  file=sys.stderr)
        return getattr(stop, "exit_code", 130)
    ranked = counts.get(sweep.name) or {"ok": 0, "diverged": 0, "failed": 0, "skipped": 0}  # none: an empty sweep
    tuning_counts = counts.get(f"{sweep.name}:tuning")
    tuned_line = "" if not tuning_counts else (
        f"tuning {tuning_counts['total']} runs ({tuning_counts['ok']} ok, {tuning_counts['diverged']} diverged, "
        f"{tuning_counts['failed']} failed) and ranking ")
    print(f"[{sweep.name}] finished: {tuned_line}{ranked['ok']} ok, {ranked['diverged']} diverged, {ranked['failed']} "
          f"failed, {ranked['skipped']} skipped (already done), in {clock(counts['wall_seconds'])} of wall time with "
          f"{args.workers} worker(s)" + (f", {seed_parallel} seeds at a time" if seed_parallel > 1 else "")
          + (f", {ranked['busy']} left to another process on this folder" if ranked.get("busy") else "")
          + f". Results in {out}; next: `emergence-bench {'rank' if sweep.ladder else 'leaderboard'} {out}`, "
          f"then `emergence-bench report {out}`", file=sys.stderr)
    return 1 if ranked["failed"] or (tuning_counts and tuning_counts["failed"]) else 0


def grid_axis(spec: str) -> tuple[str, list[Any]]:
    """``--grid optim.lr=1e-3,3e-3`` → ("optim.lr", [0.001, 0.003]): the values are a YAML flow list
    without its brackets, so ``--grid "mixer={name: mamba},{name: lru}"`` works too."""
    from emergence_bench.config import parse_value
    from emergence_bench.execution.sweep_spec import check_distinct

    key, _, values = spec.partition("=")
    key = key.strip().removeprefix("--")
    if not key or not values.strip():
        raise ConfigError(f"--grid takes KEY=V1,V2,..., e.g. optim.lr=1e-3,3e-3; got {spec!r}")
    try:
        parsed = parse_value(f"[{values}]")
    except Exception as error:  # a YAML syntax error: the message names the text
        why = str(error).replace("\n", " ")
        raise ConfigError(f"--grid {spec!r}: the values are not a comma-separated list ({why})") from None
    check_distinct(f"--grid {key}", parsed)
    return key, parsed


def _check_retune(sweep: Sweep, flags: list[str]) -> None:
    """``--retune`` tunes the keys of the sweep's tuning grid again: a flag that fixes one of them
    (which would stop its tuning) conflicts with it, as does a sweep that tunes nothing."""
    if sweep.tuning is None:
        raise ConfigError(f"--retune: sweep {sweep.name!r} tunes nothing (it has no tuning section); "
                          "leave --retune out")
    for flag in flags:
        key = flag.split()[-1].removeprefix("--")
        if key in sweep.tuning.grid:
            raise ConfigError(f"{flag} and --retune conflict: --retune tunes {key} again for every mixer, while {flag} "
                              f"sets it for every run (which turns its tuning off); drop one of the two")


def _mixer_keys_on_axis(sweep: Sweep, keys: dict[str, Any]) -> None:
    """``--mixer.KEY VALUE`` where the mixers are a grid axis (the sweep's own, or made by --mixers):
    KEY set on every mixer of the axis, since each entry replaces the base's mixer, which is where
    ``Sweep.override`` put it. ``--mixer.name`` there would make every mixer the same: refused."""
    grids = [grid for grid in [sweep.grid, *(group.grid for group in sweep.groups)] if "mixer" in grid]
    if not keys or not grids:
        return
    if "mixer.name" in keys:
        raise ConfigError("--mixer.name: this sweep trains several mixers (a grid axis): choose them with "
                          "--mixers NAME,NAME")
    for grid in grids:
        entries = []
        for entry in grid["mixer"]:
            holder = {"mixer": copy.deepcopy(entry)}
            for key, value in keys.items():
                set_dotted(holder, key, copy.deepcopy(value))
            entries.append(holder["mixer"])
        grid["mixer"] = entries


def _add_axis(sweep: Sweep, key: str, values: list[Any]) -> None:
    """A grid axis over ``values`` in every run of ``sweep``: it replaces an axis of that key (in the
    sweep's grid and each group's) and any fixed value the bases give it."""
    sweep.untune(key)
    sweep.grid[key] = values
    for group in sweep.groups:
        if key in group.grid:
            group.grid[key] = values


register_command("sweep", add_parser, main)
