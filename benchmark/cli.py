"""The `emergence-bench` command: list, run, sweep, leaderboard, rank, report, speed, analyze, forecast,
check-mixer.

Every config key can be given as a flag after the command, e.g.
``emergence-bench run --task.state_size 16 --mixer.n_heads 4 --trainer.max_steps 2000``.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import shlex
import sys
import traceback
import types
import warnings
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Callable, Literal, Union, get_args, get_origin, get_type_hints

from emergence_bench.analysis import analyze
from emergence_bench.config import Batching
from emergence_bench.forecast import command as forecast
from emergence_bench.result_row import emergence_step, section

EXIT_BAD_INPUT = 2  # a mistake in what was asked: one line on stderr names it (see expected_errors)
EXIT_BUG = 70  # sysexits' EX_SOFTWARE: an unexpected error, printed with its traceback


def _overrides(extra: list[str]) -> dict:
    """``["--task.state_size", "16", "--seed=3"]`` → {"task.state_size": 16, "seed": 3}."""
    from emergence_bench.config import ConfigError, parse_value

    overrides, i = {}, 0
    while i < len(extra):
        arg = extra[i]
        if not arg.startswith("--") or len(arg) == 2:
            raise ConfigError(f"unexpected argument {arg!r}; config keys are given as --dotted.key VALUE")
        if "=" in arg:
            key, text = arg[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(extra):
                raise ConfigError(f"{arg} needs a value")
            key, text = arg[2:], extra[i + 1]
            i += 2
        overrides[key] = parse_value(text)
    return overrides


def _threads(text: str):
    """``--threads``: ``auto`` or a count (checked as trainer.threads)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--threads takes auto or a number of threads, got {text!r}") from None


def _type_name(annotation) -> str:
    """A type as the listing shows it: a fixed choice as its values (``constant | cosine | linear``)."""
    if get_origin(annotation) is Literal:
        return " | ".join(str(choice) for choice in get_args(annotation))
    if get_origin(annotation) in (Union, types.UnionType):
        return " | ".join(_type_name(part) for part in get_args(annotation))
    return str(annotation) if get_origin(annotation) is not None else getattr(annotation, "__name__", str(annotation))


def _key(name: str, annotation, default) -> str:
    """``name: type = default``: the type as annotated, else the default's type."""
    if isinstance(annotation, str) and annotation:
        kind = annotation
    elif annotation not in (None, inspect.Parameter.empty):
        kind = _type_name(annotation)
    else:
        kind = type(default).__name__ if default not in (None, inspect.Parameter.empty) else "any"
    shown = "<required>" if default is inspect.Parameter.empty else default
    return f"{name}: {kind} = {shown}"


def _wrapped(keys: list[str], indent: str = "      ", width: int = 110) -> list[str]:
    """``keys`` on lines of at most ``width`` characters, never breaking one key."""
    lines: list[str] = []
    for key in keys:
        if lines and len(lines[-1]) + 3 + len(key) <= width:
            lines[-1] += "   " + key
        else:
            lines.append(indent + key)
    return lines or [indent + "(no parameters)"]


def _sections() -> list[str]:
    """Every config section with its keys, type and default (the named sections list below)."""
    from emergence_bench.config import DEFAULT_CALLBACKS, DEFAULT_MIXER, DEFAULT_TASK, SECTIONS, RunConfig

    lines = ["config sections (`run --print-config` shows one resolved; flags: --section.key VALUE):",
             f"  seed: int = {RunConfig().seed}",
             f"  task: name = {DEFAULT_TASK}, then the task's parameters (tasks below)",
             f"  mixer: name = {DEFAULT_MIXER}, then the mixer's parameters (mixers below)"]
    for name, cls in SECTIONS.items():
        defaults, hints = cls(), get_type_hints(cls)
        lines.append(f"  {name}:")
        lines.extend(_wrapped([_key(f.name, hints[f.name], getattr(defaults, f.name)) for f in dataclasses.fields(cls)]))
    lines.append("  curriculum: list = [] (stages of {task, steps, vocab, reset_optimizer} trained first)")
    lines.append(f"  callbacks: each callback's name and parameters (callbacks below); on by default: "
                 f"{', '.join(DEFAULT_CALLBACKS)}")
    return lines


def _describe(reg) -> list[str]:
    from emergence_bench.config import takes_kwargs

    lines = []
    for name in reg.names():
        cls = reg.get(name)
        facts = [f"{cls.__module__}.{cls.__qualname__}"]
        if reg.kind == "mixer":
            facts.append("attention scores" if getattr(cls, "exposes_attention", False) else "no attention scores")
            facts.append("backends: " + ", ".join(getattr(cls, "backends", ("torch",))))
        lines.append(f"  {name}  ({'; '.join(facts)})")
        params = reg.parameters(name)
        try:
            annotations = {k: p.annotation for k, p in inspect.signature(cls.__init__).parameters.items()}
        except (TypeError, ValueError):
            annotations = {}
        keys = [_key(k, annotations.get(k), v) for k, v in params.items()]
        if takes_kwargs(cls):
            keys.append("**kwargs (passed through unchecked)")
        lines.extend(_wrapped(keys))
    for name, error in reg.broken.items():
        lines.append(f"  {name}  (plugin failed to import: {error})")
    return lines


def cmd_list(args, extra) -> int:
    from emergence_bench import registry
    from emergence_bench.execution.sweep_spec import load_sweep, presets

    lines = _sections()
    for title, reg in (("mixers", registry.mixers), ("tasks", registry.tasks), ("callbacks", registry.callbacks)):
        lines.append(f"{title}:")
        lines.extend(_describe(reg))
    lines.append("presets:")
    for name in presets():
        sweep = load_sweep(name)
        lines.append(f"  {name}  ({sweep.count()} runs) {sweep.description}".rstrip())
    print("\n".join(lines))
    return 0


def cmd_run(args, extra) -> int:
    from emergence_bench.config import dump_yaml, load_yaml, set_dotted
    from emergence_bench.machine.threads import choose_threads
    from emergence_bench.results import RESULT_FILE
    from emergence_bench.run import check, run

    data = load_yaml(args.config) if args.config else {}
    for key, value in _overrides(extra).items():
        set_dotted(data, key, value)
    if args.threads is not None:
        set_dotted(data, "trainer.threads", args.threads)
    config = check(data)
    if args.print_config:
        print(dump_yaml(config.to_dict()), end="")
        return 0
    choose_threads(config.trainer.threads, 0.0)  # a count above this machine's cores fails before anything runs
    results_folder(args.out)
    if args.seed_parallel > 1:
        return _run_seeds(config, args)
    print(f"run {config.run_id()} → {Path(args.out) / config.run_id()}", file=sys.stderr)
    record = run(config, args.out, progress=True)
    e, p, m = section(record, "emergence"), section(record, "plateau"), section(record, "metrics")
    print(f"status {record['status']}" + (f": {record['error'].splitlines()[0]}" if record["error"] else ""))
    if record["status"] != "failed":
        print(f"emergence step {e.get('step')} (accuracy ≥ {e.get('threshold')})  "
              f"plateau end {p.get('end_step')} (loss < {p.get('threshold', 0):.3f})  "
              f"final eval loss {m.get('final_eval_loss')}  steps/s {record['timing']['steps_per_second']}  "
              f"threads {record.get('threads')}")
    print(f"result: {Path(args.out) / config.run_id() / RESULT_FILE}")
    return 1 if record["status"] == "failed" else 0


def _run_seeds(config, args) -> int:
    """`run --seed-parallel K`: seeds s, s+1, ..., s+K-1 of the config, trained together."""
    from emergence_bench.execution.seed_parallel import run_seed_parallel
    from emergence_bench.results import RESULT_FILE
    from emergence_bench.run import check

    configs = []
    for offset in range(args.seed_parallel):
        data = config.to_dict()
        data["seed"] = config.seed + offset
        configs.append(check(data))
    print(f"run seeds {configs[0].seed}..{configs[-1].seed} together → {args.out}", file=sys.stderr)
    records = run_seed_parallel(configs, args.out, progress=True, batching=args.batching)
    for record in records:
        note = section(record, "seed_parallel")
        print(f"seed {record['seed']}: status {record['status']}  emergence step {emergence_step(record)}  "
              f"({'batched, k=' + str(note.get('k')) if not note.get('fallback') else 'sequential: ' + note['fallback']})"
              f"  result: {Path(args.out) / record['run_id'] / RESULT_FILE}")
    return 1 if any(r["status"] == "failed" for r in records) else 0


def cmd_sweep(args, extra) -> int:
    from emergence_bench.execution import tuning
    from emergence_bench.execution.sweep_spec import load_sweep, presets
    from emergence_bench.execution.sweep import clock, run_sweep

    if args.list:
        for name in presets():
            sweep = load_sweep(name)
            groups = ", ".join(f"{g.name}" for g in sweep.groups)
            print(f"{name}  {sweep.count()} runs  {sweep.description}".rstrip()
                  + (f"\n    groups: {groups}" if groups else ""))
        return 0
    if not args.sweep:
        raise ValueError("give a preset name or sweep file (see `emergence-bench sweep --list`)")
    sweep = load_sweep(args.sweep)
    if args.group:
        sweep.select([g.strip() for g in args.group.split(",") if g.strip()])
    if args.mixers:
        sweep.choose_mixers([m.strip() for m in args.mixers.split(",") if m.strip()])
    overrides = _overrides(extra)
    if args.threads is not None:
        overrides["trainer.threads"] = args.threads
    if args.forecast_stop:
        if not Path(args.forecast_stop).is_file():
            raise ValueError(f"--forecast-stop: no such file {args.forecast_stop} "
                             "(write one with `emergence-bench forecast DIR --save FLEET=PATH`)")
        overrides["callbacks.forecast_stop"] = {"model": str(Path(args.forecast_stop).resolve()), "risk": args.risk}
    sweep.override(overrides)
    for spec in args.grid or []:
        _add_axis(sweep, *_grid_axis(spec))
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

    def train(this, folder, parallel=seed_parallel) -> dict:
        return run_sweep(this, folder, workers=args.workers, executor=args.executor, ray_options=ray_options,
                         seed_parallel=parallel, batching=args.batching or this.batching)

    try:
        if jobs and sweep.tuning is not None:
            tuning_parallel = args.seed_parallel or (sweep.tuning.seed_parallel if args.executor == "local" else 1)
            tuning.tune(sweep, Path(out), lambda this, folder: train(this, folder, tuning_parallel), jobs,
                        lambda line: print(line, file=sys.stderr, flush=True))
        counts = train(sweep, out)
    except KeyboardInterrupt as stop:  # a SweepStopped has printed what it kept, and carries 128 + its signal
        if not hasattr(stop, "exit_code"):
            print(f"\ninterrupted: finished results are kept in {out}; rerun the same command to resume",
                  file=sys.stderr)
        return getattr(stop, "exit_code", 130)
    print(f"[{sweep.name}] finished: {counts['ok']} ok, {counts['diverged']} diverged, {counts['failed']} failed, "
          f"{counts['skipped']} skipped (already done), in {clock(counts['wall_seconds'])} of wall time with "
          f"{args.workers} worker(s)" + (f", {seed_parallel} seeds at a time" if seed_parallel > 1 else "")
          + (f", {counts['busy']} left to another process on this folder" if counts.get("busy") else "")
          + f". Results in {out}; see `emergence-bench leaderboard {out}`", file=sys.stderr)
    return 1 if counts["failed"] else 0


def _grid_axis(spec: str) -> tuple[str, list]:
    """``--grid optim.lr=1e-3,3e-3`` → ("optim.lr", [0.001, 0.003]): the values are a YAML flow list
    without its brackets, so ``--grid "mixer={name: mamba},{name: lru}"`` works too."""
    from emergence_bench.config import ConfigError, parse_value
    from emergence_bench.execution.sweep_spec import check_distinct

    key, _, values = spec.partition("=")
    key = key.strip().removeprefix("--")
    if not key or not values.strip():
        raise ConfigError(f"--grid takes KEY=V1,V2,..., e.g. optim.lr=1e-3,3e-3; got {spec!r}")
    try:
        parsed = parse_value(f"[{values}]")
    except Exception as error:  # a YAML syntax error: the message names the text
        raise ConfigError(f"--grid {spec!r}: the values are not a comma-separated list ({error})".replace("\n", " ")) from None
    check_distinct(f"--grid {key}", parsed)
    return key, parsed


def _add_axis(sweep, key: str, values: list) -> None:
    """A grid axis over ``values`` in every run of ``sweep``: it replaces an axis of that key (in the
    sweep's grid and each group's) and any fixed value the bases give it."""
    sweep.untune(key)
    sweep.grid[key] = values
    for group in sweep.groups:
        if key in group.grid:
            group.grid[key] = values


def cmd_leaderboard(args, extra) -> int:
    from emergence_bench.reporting import leaderboard
    from emergence_bench.results import load_records, mixed_code_note

    if not Path(args.dir).is_dir():
        raise ValueError(f"no such results directory: {args.dir}")
    over = tuple(k.strip() for k in args.over.split(",") if k.strip())
    table, markdown = leaderboard.write(args.dir, over, baseline=args.baseline, strict=args.strict)
    print(markdown, end="")
    print(f"\nwrote {Path(args.dir) / 'leaderboard.md'} and {Path(args.dir) / 'leaderboard.csv'} "
          f"({len(table)} rows)", file=sys.stderr)
    note = mixed_code_note(load_records(args.dir, quiet=True))
    if note:
        print(f"note: {note} (see each result's provenance, or the report's)", file=sys.stderr)
    return 0


def cmd_rank(args, extra) -> int:
    from emergence_bench.reporting import rank

    if not Path(args.dir).is_dir():
        raise ValueError(f"no such results directory: {args.dir}")
    axes = {}
    for spec in args.rung or []:
        family, _, key = spec.partition("=")
        if not family or not key:
            raise ValueError(f"--rung takes FAMILY=KEY, e.g. linear_map=task.sparsity; got {spec!r}")
        axes[family] = key if "." in key else f"task.{key}"
    ranked, markdown = rank.write(args.dir, axes, strict=args.strict, baseline=args.baseline,
                                  reference_name=args.reference)
    print(markdown, end="")
    print(f"\nwrote {Path(args.dir) / 'rank.md'}, rank.csv and rank.json ({len(ranked['ranking'])} mixers, "
          f"{len(ranked['cells'])} cells)", file=sys.stderr)
    return 0


def cmd_report(args, extra) -> int:
    from emergence_bench.reporting import report

    axes = tuple(a.strip() for a in args.axes.split(",")) if args.axes else None
    if axes is not None and len(axes) != 2:
        raise ValueError(f"--axes takes two config keys, e.g. task.state_size,task.sparsity; got {args.axes!r}")
    over = tuple(k.strip() for k in args.over.split(",") if k.strip())
    figures = tuple(f.strip() for f in args.figures.split(",") if f.strip()) if args.figures else None
    path = report.write(args.dir, args.out, axes=axes, maps=args.maps, over=over, strict=args.strict,
                        figures=figures, seed=args.seed)
    print(f"report: {path}")
    if not args.screenshot:
        return 0
    from emergence_bench.reporting.browser import check_page, find_browser

    if find_browser() is None:
        raise ValueError("--screenshot needs a headless browser: none of chromium, google-chrome on PATH "
                         "(on Debian: apt-get install chromium)")
    shot = path.with_suffix(".png")
    check = check_page(path, shot)
    print(f"screenshot: {shot} ({len(check.images)} figures, all loaded)" if check.ok else
          f"screenshot: {shot}; in the browser: figures that did not load: {', '.join(check.broken) or 'none'}; "
          f"errors logged: {'; '.join(check.errors) or 'none'}")
    return 0 if check.ok else 1


def cmd_speed(args, extra) -> int:
    from emergence_bench.perf import speed

    try:
        lengths = tuple(int(n) for n in args.lengths.split(",")) if args.lengths else None
        seeds = tuple(int(n) for n in args.seeds.split(","))
    except ValueError:
        raise ValueError(f"--lengths and --seeds take comma-separated whole numbers, got {args.lengths!r} and "
                         f"{args.seeds!r}") from None
    mixers = [m.strip() for m in args.mixers.split(",")] if args.mixers else None
    speed.main(args.out, lengths=lengths, repeats=args.repeats, quick=args.quick, steps=args.steps, seeds=seeds,
               mixers=mixers, cells=not args.no_cells, cell_steps=args.cell_steps)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def cmd_check_mixer(args, extra) -> int:
    """`check-mixer NAME [--mixer.KEY VALUE ...]`: the table of mixer_check's checks; 1 if one fails."""
    from emergence_bench import mixer_check, registry
    from emergence_bench.config import ConfigError

    overrides = {}
    for key, value in _overrides(extra).items():
        if not key.startswith("mixer.") or key == "mixer.name":
            raise ConfigError(f"check-mixer takes the mixer's name, then its keys as --mixer.KEY VALUE; got --{key}")
        overrides[key[len("mixer."):]] = value
    skip = [c.strip() for c in (args.skip or "").split(",") if c.strip()]
    unknown = [c for c in skip if c not in mixer_check.check_names()]
    if unknown:
        raise ConfigError(f"--skip: no check named {', '.join(unknown)}; checks: {', '.join(mixer_check.check_names())}")
    registry.mixers.get(args.name)  # an unknown name is bad input (exit 2, with the closest name), not a failed check
    results = mixer_check.check_mixer(args.name, overrides, skip=skip)
    print(mixer_check.render(args.name, results))
    return 1 if any(r.failed for r in results) else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="emergence-bench", description=__doc__, allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every mixer, task, callback and preset with its parameters")
    # No abbreviations: `--seed 3` is a config key, never short for `--seed-parallel`.
    run = sub.add_parser("run", allow_abbrev=False,
                         help="run one experiment; any config key can follow as --dotted.key VALUE")
    run.add_argument("--config", help="a run config YAML (default: the built-in defaults)")
    run.add_argument("--out", default="runs", help="results directory (default: runs)")
    run.add_argument("--seed-parallel", type=int, default=1, metavar="K",
                     help="train seeds s..s+K-1 together as one batched model (one result each)")
    batching_help = ("with --seed-parallel: auto (default) batches a group only where a short probe measures "
                     "it faster than one seed at a time; always batches")
    run.add_argument("--batching", choices=get_args(Batching), default="auto", help=batching_help)
    threads_help = ("torch threads per run: auto (default: 1 for small models, else the cores a run has) "
                    "or N (= --trainer.threads N; not part of the run id)")
    run.add_argument("--threads", type=_threads, metavar="N|auto", help=threads_help)
    run.add_argument("--print-config", action="store_true",
                     help="print the resolved config as YAML (every default filled in) and exit; "
                          "`run --config` on it gives the same run id")
    sweep = sub.add_parser("sweep", allow_abbrev=False,
                           help="run a preset or sweep file with local workers; resumes where it stopped")
    sweep.add_argument("sweep", nargs="?", help="preset name or sweep YAML file")
    sweep.add_argument("--out", help="results directory (default: runs/<sweep name>)")
    sweep.add_argument("--workers", type=int, default=1, help="parallel worker processes (default 1)")
    sweep.add_argument("--threads", type=_threads, metavar="N|auto",
                       help=threads_help + "; workers × threads must fit the cores")
    sweep.add_argument("--executor", choices=("local", "ray"), default="local",
                       help="local worker processes (default) or one Ray task per run")
    sweep.add_argument("--address", help="Ray cluster address (default: start a local Ray instance)")
    sweep.add_argument("--num-cpus", type=float, default=1, help="CPUs per run on Ray (default 1)")
    sweep.add_argument("--num-gpus", type=float, default=0, help="GPUs per run on Ray, may be fractional (default 0)")
    sweep.add_argument("--max-retries", type=int, default=3, help="Ray retries of a run whose worker died")
    sweep.add_argument("--seed-parallel", type=int, metavar="K",
                       help="train up to K seeds of the same config together (local executor; default: the "
                            "sweep file's seed_parallel, else 1)")
    sweep.add_argument("--batching", choices=get_args(Batching), help=batching_help + " (default: the sweep "
                                                                                    "file's batching, else auto)")
    sweep.add_argument("--group", help="run only these groups of the sweep (comma-separated)")
    sweep.add_argument("--mixers", help="train exactly these mixers (comma-separated): the sweep's own settings "
                                        "for the ones it has, defaults for others (e.g. a plugin)")
    sweep.add_argument("--scale", type=float, default=1.0,
                       help="multiply every run's max_steps and eval_every (e.g. 0.1 for a CPU-sized try)")
    sweep.add_argument("--grid", action="append", metavar="KEY=V1,V2",
                       help="a grid axis from the command line (repeatable), e.g. optim.lr=1e-3,3e-3; "
                            "it replaces the sweep's axis or value for that key")
    sweep.add_argument("--forecast-stop", metavar="MODEL",
                       help="end each run that a saved forecast (`forecast --save`) gives less than --risk of "
                            "emerging within its budget; its row says forecast-stopped")
    sweep.add_argument("--risk", type=float, default=0.05,
                       help="with --forecast-stop: the forecast probability of emerging below which a run stops "
                            "(default 0.05)")
    sweep.add_argument("--dry-run", action="store_true", help="list the run ids and exit")
    sweep.add_argument("--print-config", action="store_true",
                       help="print each run's resolved config (one YAML document per run) and exit")
    sweep.add_argument("--list", action="store_true", help="list the presets with their run counts")
    sweep.add_argument("--retune", action="store_true",
                       help="tune every mixer of a tuned preset again (into DIR/tuning), not only those without "
                            "frozen values, and rank them at the new choices")
    board = sub.add_parser("leaderboard", help="aggregate the results under DIR over seeds")
    board.add_argument("dir")
    board.add_argument("--over", default="seed",
                       help="comma-separated config keys to aggregate over (default: seed)")
    board.add_argument("--baseline", help="add ratio columns against the row with key=value, "
                                          "e.g. mixer=transformer or model.n_layers=1")
    ranking = sub.add_parser("rank", help="rank the mixers under DIR: frontier and area per task family's ladder")
    ranking.add_argument("dir")
    ranking.add_argument("--rung", action="append", metavar="FAMILY=KEY",
                         help="the ladder's task key of a family where several vary (repeatable)")
    ranking.add_argument("--baseline", help="the mixer the plateau ratios divide by (default: transformer)")
    ranking.add_argument("--reference", metavar="builtin|FILE",
                         help="rank against shipped reference results for the mixers DIR lacks: `builtin` (the "
                              "built-in mixers on the standard CPU ladder) or a reference file")
    rep = sub.add_parser("report", help="write one self-contained HTML report of the results under DIR")
    rep.add_argument("dir")
    rep.add_argument("--out", help="HTML file to write (default: DIR/report.html)")
    rep.add_argument("--axes", help="two config keys for the heatmap, e.g. task.state_size,task.sparsity")
    rep.add_argument("--maps", type=int, default=4, help="attention-map figures to include (default 4)")
    rep.add_argument("--over", default="seed", help="config keys to aggregate over (default: seed)")
    rep.add_argument("--seed", type=int, help="the seed the staircase and the filmstrip show "
                                               "(default: each group's median-emergence seed)")
    rep.add_argument("--screenshot", action="store_true",
                     help="open the page in headless Chromium: check every figure loaded and nothing logged an error, "
                          "and save a full-page screenshot beside it (report.png)")
    rep.add_argument("--figures", help="the figures to draw, comma-separated, of: curves, staircase, seeds, ranking, axes, "
                                       "thresholds, heatmap, filmstrip, maps (default: every one the results allow)")
    for command in (board, ranking, rep):
        command.add_argument("--strict", action="store_true",
                             help="an unreadable result.json is an error (default: a warning naming it; it is left out)")
    analyze.add_parser(sub)
    forecast.add_parser(sub)
    speed = sub.add_parser("speed", help="speed ratios measured side by side on this machine")
    speed.add_argument("--out", default="speed.json", help="where to write the table as JSON")
    speed.add_argument("--lengths", default=None, help="the mixer table's sequence lengths (comma-separated; "
                       "default 16,64,256, with --quick 16)")
    speed.add_argument("--mixers", default=None, help="the mixers of the mixer tables (comma-separated; default: "
                       "the built-in ones); --quick honours it")
    speed.add_argument("--cell-steps", type=int, default=100, help="steps of each ranking cell the cell clock times")
    speed.add_argument("--no-cells", action="store_true", help="leave out the ranking-cell clock")
    speed.add_argument("--repeats", type=int, default=5, help="interleaved repeats per ratio (≥ 5; the median and range are printed)")
    speed.add_argument("--steps", type=int, default=100, help="timed training steps per suite measurement")
    speed.add_argument("--seeds", default="1,4,16", help="seed-parallel group sizes K (comma-separated)")
    speed.add_argument("--quick", action="store_true", help="a smoke run: one short length, one repeat")
    check = sub.add_parser("check-mixer", allow_abbrev=False,
                           help="is a mixer (e.g. your plugin) fit for the suite? a table of checks; "
                                "its keys follow as --mixer.KEY VALUE")
    check.add_argument("name", help="the registered mixer name")
    check.add_argument("--skip", metavar="CHECKS", help="comma-separated checks not to run (e.g. learns,speed)")
    return p


COMMANDS: dict[str, Callable[..., int]] = {"list": cmd_list, "run": cmd_run, "sweep": cmd_sweep, "leaderboard": cmd_leaderboard,
            "rank": cmd_rank, "report": cmd_report, "speed": cmd_speed, "analyze": analyze.main,
            "forecast": forecast.main}
COMMANDS["check-mixer"] = cmd_check_mixer


def _version() -> str:
    try:
        return version("emergence-bench")
    except PackageNotFoundError:
        return "(not installed)"


# Optional packages by import name: the extra that installs them (pyproject.toml).
EXTRAS = {"ray": "ray", "transformers": "pythia", "tokenizers": "pythia", "websocket": "browser", "wandb": "wandb"}


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    argv = sys.argv[1:] if argv is None else list(argv)
    args, extra = parser().parse_known_args(argv)
    if extra and args.command in ("list", "leaderboard", "rank", "report", "speed"):
        parser().error(f"unrecognized arguments: {' '.join(extra)}")
    from emergence_bench.results import COMMAND_ENV

    before = os.environ.get(COMMAND_ENV)
    os.environ[COMMAND_ENV] = shlex.join(["emergence-bench", *argv])  # each result records it (sweep workers too)
    try:
        return COMMANDS[args.command](args, extra)
    except expected_errors() as error:
        print(f"error: {' '.join(str(error).splitlines())}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as error:
        missing = (getattr(error, "name", None) or "").split(".")[0] if isinstance(error, ModuleNotFoundError) else ""
        if missing in EXTRAS:  # an optional package this command needs: say which extra installs it
            print(f"error: this needs the optional package {missing!r}: "
                  f".venv/bin/pip install -e '.[{EXTRAS[missing]}]'", file=sys.stderr)
            return EXIT_BAD_INPUT
        # a bug: keep everything needed to find it
        traceback.print_exc()
        print("error: this is a bug in emergence-bench, not in your input: please report it with the command "
              "line and the traceback above", file=sys.stderr)
        return EXIT_BUG
    finally:  # main() may be called in a process that goes on (a test, a notebook)
        if before is None:
            os.environ.pop(COMMAND_ENV, None)
        else:
            os.environ[COMMAND_ENV] = before


def expected_errors() -> tuple[type[BaseException], ...]:
    """The errors that are the user's input, not a bug: a bad config, file, folder or results
    (ConfigError and UnreadableResult are ValueErrors, as are the tasks' and mixers' own checks of
    their parameters), an unknown name, a run another process holds. Each is one line: what is wrong
    and what would fix it. Anything else is unexpected and keeps its traceback."""
    from emergence_bench.registry import UnknownNameError
    from emergence_bench.run import RunBusy

    return ValueError, UnknownNameError, RunBusy


def results_folder(path: str | Path) -> Path:
    """``path`` created (with its parents) for results; a path that cannot be is bad input."""
    from emergence_bench.config import ConfigError

    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"cannot create the results folder {path}: {error.strerror or error} "
                          f"(choose another --out)") from None
    return path


if __name__ == "__main__":
    sys.exit(main())
