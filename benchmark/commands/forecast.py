"""`emergence-bench forecast DIR`: how well each run's emergence step is forecast from its early records.

The runs under DIR are split into fleets (runs equal but for the seed). For each fleet: the
leave-one-out forecast at its window; for each ordered pair of fleets: the pipeline fitted on one
and applied to the other (e.g. fit on s=3, forecast s=4). The window is, per fleet, the last eval
before its first run emerged (``--window auto``), or a step. ``--save`` writes the pipeline fitted
on a whole fleet for ``sweep --forecast-stop``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from emergence_bench.commands.arguments import add_results_dir, finite, writable, writable_results
from emergence_bench.commands.command import Subparsers, register_command
from emergence_bench.forecast import PERMUTATIONS

if TYPE_CHECKING:  # the CLI imports this module for its parser: the numerical stack loads in main()
    from emergence_bench.forecast.evaluate import Fleet
    from emergence_bench.results.row import ResultRow, Row

MIN_FLEET = 3  # leave-one-out on 2 runs fits on 1: no score of it means anything


def fleets(rows: Sequence[ResultRow]) -> dict[str, list[ResultRow]]:
    """Rows that differ only in their seed, labelled by the config keys that tell the fleets apart."""
    from emergence_bench.config import hashed_config
    from emergence_bench.reporting.leaderboard import flatten, group_key

    grouped: dict[str, list[ResultRow]] = {}
    for row in rows:
        grouped.setdefault(group_key(row), []).append(row)
    flats = {key: flatten(hashed_config(members[0]["config"])) for key, members in grouped.items()}
    keys = sorted({k for flat in flats.values() for k in flat if k != "seed"})
    varying = [k for k in keys if len({json.dumps(f.get(k), default=str) for f in flats.values()}) > 1]
    task_keys = [k for k in varying if k.startswith("task.")]
    if task_keys and len({tuple(str(f.get(k)) for k in task_keys) for f in flats.values()}) == len(flats):
        varying = task_keys  # the task tells the fleets apart (a budget that follows it needs no mention)
    def label(flat: dict) -> str:
        return ", ".join(f"{k.removeprefix('task.')}={flat.get(k)}" for k in varying) or "all runs"
    return {label(flats[key]): members for key, members in grouped.items()}


def window_of(rows: Sequence[Row], window: str) -> int:
    """``auto``: the last eval before the fleet's first emergence; else the step given."""
    from emergence_bench.forecast.features import first_emergence, last_eval_before

    if window != "auto":
        return int(window)
    first = first_emergence(rows)
    if first is None:
        raise ValueError("--window auto needs a fleet where some run emerged (none did); give --window STEP")
    return last_eval_before(rows, first)


def fleet(name: str, rows: Sequence[Row], window: int) -> Fleet:
    from emergence_bench.forecast.evaluate import Fleet
    from emergence_bench.forecast.features import FEATURES, matrix, outcomes

    y, censored = outcomes(rows)
    X = matrix(rows, window)
    usable = [j for j in range(X.shape[1]) if math.isfinite(X[:, j].sum())]
    if not usable:
        raise ValueError(f"fleet {name}: no feature can be read at step {window} (no probe, no eval by then)")
    return Fleet(name, window, X[:, usable], y, censored, tuple(FEATURES[j] for j in usable))


def _number(value: float, digits: int = 2) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def to_markdown(results: list[dict]) -> str:
    from emergence_bench.reporting.table import Table

    rows = [[r["fit"], r["apply"], str(r["window"]), f"{r['n']} ({r['emerged']})", ", ".join(r["features"]),
             _number(r["c_index"]), _number(r["spearman"]), _number(r["pearson"]),
             f"{_number(r['mae'])} vs {_number(r['mae_baseline'])}", _number(r["p_c_index"], 3),
             _number(r["p_spearman"], 3)] for r in results]
    header = ["fit on", "forecast", "window", "runs (emerged)", "features", "C-index", "Spearman ρ", "Pearson r",
              "MAE (log) vs mean", "p (C)", "p (ρ)"]
    return Table(header, rows).markdown() + "\n"


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("forecast", help="forecast each run's emergence step from its early records: "
                                               "leave-one-out and cross-fleet quality, with permutation p")
    add_results_dir(p)
    p.add_argument("--window", default="auto", help="window end: auto (per fleet, the last eval before its first "
                                                    "emergence; default) or a step")
    p.add_argument("--features", type=int, default=2, metavar="K", help="features the pipeline selects (default 2)")
    p.add_argument("--permutations", type=int, default=PERMUTATIONS,
                   help=f"shuffles for the permutation p (default {PERMUTATIONS})")
    p.add_argument("--stopped", metavar="DIR2",
                   help="also compare DIR2, the same runs swept with --forecast-stop, against DIR's known outcomes: "
                        "steps saved and runs wrongly stopped")
    p.add_argument("--replay", metavar="MODEL",
                   help="what --forecast-stop with this saved forecast would have done to DIR's runs (their outcomes "
                        "known): steps saved and runs wrongly stopped, per fleet")
    p.add_argument("--risk", type=finite, default=0.05, help="with --replay: the stop's risk level (default 0.05)")
    p.add_argument("--save", metavar="FLEET=PATH",
                   help="write the pipeline fitted on that whole fleet (its label, as printed) for sweep "
                        "--forecast-stop")
    return p


def main(args: argparse.Namespace, extra: list[str] | None = None) -> int:
    if extra:
        raise ValueError(f"forecast takes no config keys; got {' '.join(extra)}")
    folder = Path(args.dir)
    if not folder.is_dir():
        raise ValueError(f"no such results directory: {args.dir}")
    if args.features < 1 or args.permutations < 1:
        raise ValueError("--features and --permutations must be ≥ 1")
    # Every file it writes, checked before anything is computed or written.
    writable_results(folder, "forecast", "forecast.md and .json")
    saved_model = _saved_forecast(args.replay) if args.replay else None
    if args.stopped is not None:
        if not Path(args.stopped).is_dir():  # a second folder, named by its flag
            raise ValueError(f"--stopped: no such results directory: {args.stopped}")
        writable_results(Path(args.stopped), "forecast --stopped", "forecast-stop.json")
    if args.save:
        saved_to = Path(args.save.rpartition("=")[2] or ".")
        if saved_to.is_dir():
            raise ValueError(f"--save {args.save}: {saved_to} is a folder; give FLEET=FILE, the file to write")
        writable(saved_to.parent, f"--save {args.save}: choose another PATH")
    from emergence_bench.forecast.evaluate import in_domain, replay_stop, stop_savings, transfer
    from emergence_bench.results.atomic import write_files
    from emergence_bench.results.store import json_text, load_records, without_non_finite

    rows = [r for r in load_records(folder) if r.get("status") == "ok"]
    if not rows:
        raise ValueError(f"no finished runs under {args.dir}")
    found = fleets(rows)
    small = {name: len(members) for name, members in found.items() if len(members) < MIN_FLEET}
    if len(small) == len(found):
        sizes = ", ".join(f"{name}: {n}" for name, n in small.items())
        raise ValueError(f"a forecast needs at least {MIN_FLEET} runs equal but for the seed, and no fleet under "
                         f"{args.dir} has them ({sizes})")
    for name, n in small.items():
        print(f"[forecast] {name}: {n} run(s), fewer than {MIN_FLEET}: left out", file=sys.stderr)
    groups = {name: fleet(name, members, window_of(members, args.window))
              for name, members in found.items() if name not in small}
    if args.save:  # its fleet named before anything is computed
        _save_target(args.save, groups)
    results = []
    for name, one in groups.items():
        print(f"[forecast] {name}: {len(one.y)} runs, window {one.window}, leave-one-out …", file=sys.stderr)
        results.append(in_domain(one, args.features, args.permutations))
    for train in groups.values():
        for test in groups.values():
            if train is not test:
                common = tuple(n for n in train.names if n in test.names)
                results.append(transfer(_columns(train, common), _columns(test, common), args.features,
                                        args.permutations))
    markdown = to_markdown(results)
    # Every file, written together at the end: a command that fails on the way leaves the earlier ones.
    # A score that is not defined (e.g. a correlation over fewer than 3 emerged runs) is null.
    files = {folder / "forecast.md": markdown,
             folder / "forecast.json": json_text({"results": without_non_finite(results)[0]})}
    if args.save:
        files.update(_saved(args.save, groups, args.features))
    lines = []
    if saved_model is not None:
        for name, members in fleets(rows).items():
            stopped = replay_stop(saved_model, members, args.risk)
            lines.append(f"\n{name}: " + _savings_line(stop_savings(members, stopped)))
    if args.stopped:
        saved = stop_savings(rows, [r for r in load_records(args.stopped) if r.get("status") == "ok"])
        lines.append("\nforecast stop: " + _savings_line(saved))
        files[Path(args.stopped) / "forecast-stop.json"] = json_text(saved)
    write_files(files)
    print(markdown, end="")
    if args.save:
        name, _, path = args.save.rpartition("=")
        print(f"[forecast] saved the pipeline fitted on {name} (window {groups[name].window}) to {path}",
              file=sys.stderr)
    for line in lines:
        print(line)
    return 0


def _saved_forecast(path: str) -> dict:
    """``--replay PATH``: a forecast ``--save`` wrote; else bad input naming it."""
    how = "write one with `emergence-bench forecast DIR --save FLEET=PATH`"
    if Path(path).is_dir():
        raise ValueError(f"--replay {path} is a folder, not a saved forecast; {how}")
    if not Path(path).is_file():
        raise ValueError(f"--replay: no such file {path}; {how}")
    try:
        saved = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"--replay {path} is not a saved forecast ({' '.join(str(error).split())}); {how}") from None
    if not isinstance(saved, dict) or "model" not in saved:
        raise ValueError(f"--replay {path} is not a saved forecast (JSON without its model); {how}")
    return saved


def _savings_line(saved: dict) -> str:
    return (f"{saved['stopped']} of {saved['runs']} runs stopped, {saved['wrongly_stopped']} wrongly "
            f"({saved['wrongly_stopped_of_emerged']:.0%} of the {saved['would_emerge']} that would emerge); "
            f"{saved['saved']:.0%} of the training steps saved ({saved['steps_with']} of {saved['steps_without']})")


def _columns(one: Fleet, names: tuple[str, ...]) -> Fleet:
    from emergence_bench.forecast.evaluate import Fleet

    keep = [one.names.index(n) for n in names]
    return Fleet(one.name, one.window, one.X[:, keep], one.y, one.censored, names)


def _save_target(spec: str, groups: dict[str, Fleet]) -> Path:
    """``--save FLEET=PATH``: the path, once FLEET is one of ``groups``; else bad input naming them."""
    name, _, path = spec.rpartition("=")
    if name not in groups or not path:
        raise ValueError(f"--save takes FLEET=PATH with FLEET one of: {', '.join(groups)}; got {spec!r}")
    return Path(path)


def _saved(spec: str, groups: dict[str, Fleet], k: int) -> dict[Path, str]:
    """``--save FLEET=PATH``'s file: the pipeline fitted on the whole fleet, as JSON."""
    from emergence_bench.forecast.evaluate import pipeline
    from emergence_bench.results.store import json_text

    path, one = _save_target(spec, groups), groups[spec.rpartition("=")[0]]
    model, _ = pipeline(one.X, one.y, one.censored, one.names, k)
    return {path: json_text({"fleet": one.name, "window": one.window, "model": model.to_dict()})}


register_command("forecast", add_parser, main)
