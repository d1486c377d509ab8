"""One versioned result record per run, written atomically as JSON; ``load`` gives a DataFrame.

Also the one list of what a run folder holds (so the code that writes a file and the code that reads
it agree on its name), its text and JSON writers (through ``results.atomic``, as every file of it),
and the progress summary of a row that the executors report.
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import shlex
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, get_args

from emergence_bench.machine import allocator
from emergence_bench.results.atomic import write_files
from emergence_bench.results.row import MAPPINGS, ResultRow, Row, Status, emergence_step, plateau_section, section
from emergence_bench.stats.held_plateau import plateau_fields

if TYPE_CHECKING:
    import pandas as pd

SCHEMA_VERSION = 3  # 2: task_facts, full-sequence losses, init and bias patterns in the config; 3: the held plateau
READS = (2, 3)  # schema 2 rows are upgraded when read (upgrade_row)
FINISHED = ("ok", "diverged")  # a sweep does not rerun these; `failed` runs are retried
STATUSES: tuple[str, ...] = get_args(Status)  # ok, diverged, failed

# What a run folder DIR/<run_id>/ holds.
RESULT_FILE = "result.json"  # the result row, written last: its presence marks the run finished
CONFIG_FILE = "config.yaml"  # the fully resolved config (re-run it with `emergence-bench run`)
TENSORBOARD_DIR = "tensorboard"  # TensorBoard logs; a curriculum's stages in tensorboard/stage<k>
CSV_DIR = "csv"  # with trainer.logger csv: csv/metrics.csv (a curriculum's stages in csv/stage<k>)
WANDB_DIR = "wandb"  # with trainer.logger wandb: the offline Weights & Biases run files
CHECKPOINT_DIR = "checkpoints"  # model weights, step_<N>.pt (emergence_bench.callbacks.checkpoints)
MAPS_FILE = "attention_maps.pt"  # the attention probe's last maps (emergence_bench.callbacks.attention_probe)
ANALYSIS_DIR = "analysis"  # `emergence-bench analyze` outputs: emergence.json, patch_<old>_<new>.json
# What a results folder (a sweep's DIR) holds beside its run folders.
LEADERBOARD_STEM = "leaderboard"  # leaderboard.md, leaderboard.csv, leaderboard.json
RANK_STEM = "rank"  # rank.md, rank.csv, rank.json
# DIR/ladder.json: the preset's ladder version and learning-speed families (a sweep writes it).
LADDER_FILE = "ladder.json"
TUNING_DIR = "tuning"  # DIR/tuning/<group>/<run id>: a tuned sweep's tuning runs, which its ranking leaves out
TABLES_FILE = "tuning.json"  # DIR/tuning/tuning.json: the tuning tables (execution/tuning.py), one per mixer and group
REPORT_FILE = "report.html"
LOCKS_DIR = ".locks"  # <run_id>.lock: held by the process training that run (emergence_bench.engine.run_folder.RunLock)
RESUME_DIR = ".resume"  # <hash>.ckpt: where runs in flight go on from (emergence_bench.engine.resume_point)


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see ``write_atomic``)."""
    write_files({Path(path): text})


def write_ladder(folder: str | Path, preset: str, ladder: str | None, learning_speed: list[str]) -> None:
    """``folder``/ladder.json: the preset a sweep trained, its ladder version and the task families
    outside the ranking's success score, which `rank` reads."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    write_json(Path(folder) / LADDER_FILE, {"preset": preset, "ladder": ladder, "learning_speed": list(learning_speed)})


def write_json(path: str | Path, data: Mapping[str, Any] | list) -> None:
    """Write ``data`` as JSON to ``path`` atomically (strict JSON: no NaN)."""
    write_text(path, json_text(data))


def json_text(data: Mapping[str, Any] | list) -> str:
    """``data`` as the JSON text ``write_json`` writes (strict: no NaN), for ``write_files``."""
    return json.dumps(data, indent=2, allow_nan=False)


def without_non_finite(data: Any, key: str = "", found: list[str] | None = None) -> tuple[Any, list[str]]:
    """A copy of ``data`` with each NaN or ±inf float as None (strict JSON holds neither), and the
    dotted keys of those replaced, each with its value: ``["metrics.final_eval_loss: nan"]``."""
    found = [] if found is None else found
    if isinstance(data, float) and not math.isfinite(data):
        found.append(f"{key}: {data}")
        return None, found
    if isinstance(data, dict):
        return {k: without_non_finite(v, f"{key}.{k}" if key else str(k), found)[0] for k, v in data.items()}, found
    if isinstance(data, (list, tuple)):
        return [without_non_finite(v, f"{key}[{i}]", found)[0] for i, v in enumerate(data)], found
    return data, found


def progress_summary(record: Row) -> dict:
    """What an executor reports (and the sweep's progress line shows) of a finished run's row."""
    return {
        "run_id": record["run_id"],
        "status": record["status"],
        "error": (record["error"] or "").splitlines()[0] if record["error"] else None,
        "emergence_step": emergence_step(record),
    }


def busy_row(run_id: str, error: BaseException) -> dict:
    """What a sweep reports of a run another process holds (emergence_bench.engine.run_folder.RunBusy): not run
    here, not failed; that process writes its row."""
    return {"run_id": run_id, "status": "busy", "error": str(error), "emergence_step": None}


def lost_summary(run_id: str, error: BaseException) -> dict:
    """The summary of a run whose worker died or whose result could not be stored: it has no result
    file, so a rerun of the sweep retries it."""
    return {"run_id": run_id, "status": "failed", "error": f"{type(error).__name__}: {error}",
            "emergence_step": None}


def versions() -> dict:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for package in ("emergence-bench", "torch", "lightning"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


# --- provenance: which code, which command, which machine ----------------------------------------
COMMAND_ENV = "EMERGENCE_BENCH_COMMAND"  # set by the CLI, so sweep workers record the command typed
NOT_A_CHECKOUT = "not a git checkout"


@functools.cache
def git_state() -> dict:
    """The git commit of the checkout this code was loaded from, and whether its tracked files
    differed from it (``dirty``), read once per process (the code in memory is what was loaded).
    ``{"commit": None, "dirty": None, "note": "not a git checkout"}`` for an installed copy, or
    without git. Only a checkout that holds this very file counts (a .venv inside another repository
    does not)."""
    here = Path(__file__).resolve()

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(here.parent), *args], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    # The checkout must track this very file: an untracked copy (a .venv inside another repository) is none.
    if git("ls-files", "--error-unmatch", here.name) is None:
        return {"commit": None, "dirty": None, "note": NOT_A_CHECKOUT}
    commit, status = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    if commit is None:  # a repository without a commit yet
        return {"commit": None, "dirty": None, "note": "a git checkout without a commit"}
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def command_line() -> str:
    """The command that started this run: the CLI's (passed to its worker processes through
    COMMAND_ENV), else this process's own arguments (a script calling ``emergence_bench.engine.run``)."""
    return os.environ.get(COMMAND_ENV) or shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]] if sys.argv else [])


def machine() -> dict:
    return {"host": platform.node(), "platform": platform.platform(), "processor": platform.machine(),
            "cpus": os.cpu_count()}


def provenance(threads: dict) -> dict:
    """Where a run's numbers come from: the code (git commit and dirty flag), the command line, the
    machine, and the process policies that change speed but not results: ``threads`` (the thread
    policy's setting and what it chose) and the allocator policy (emergence_bench.machine.allocator)."""
    return {"git": git_state(), "command": command_line(), "machine": machine(),
            "threads": threads, "allocator": allocator.policy()}


def code_version(record: ResultRow) -> str:
    """A row's code as one short label: ``abc1234``, ``abc1234 (dirty)``, ``not a git checkout``, or
    ``not recorded`` (a row written before provenance was)."""
    git = section(record, "provenance").get("git")
    if not git:
        return "not recorded"
    commit = git.get("commit")
    if not commit:
        return git.get("note") or NOT_A_CHECKOUT
    return commit[:10] + (" (dirty)" if git.get("dirty") else "")


def mixed_code_note(records: list[ResultRow]) -> str | None:
    """A warning when ``records`` were computed by more than one version of the code (different
    commits, or a commit with and without changes), naming each with its run count, or by a dirty
    tree; None when they all come from one version whose code is known (or was not recorded)."""
    counts = Counter(code_version(r) for r in records)
    if len(counts) == 1:
        only = next(iter(counts))
        return (f"every result comes from commit {only}: uncommitted changes are not recorded"
                if only.endswith("(dirty)") else None)
    listed = ", ".join(f"{k} ({n} run{'s' if n > 1 else ''})" for k, n in counts.most_common())
    return f"these results come from {len(counts)} versions of the code, {listed}: numbers may differ between them"


class UnreadableResult(ValueError):
    """A result file that is not a result row this version reads: the message names the file and why."""


def parse_result(path: str | Path) -> ResultRow:
    """The row in ``path``, checked: JSON, an object with run_id, status and config, of this schema.
    Raises UnreadableResult otherwise (a run killed mid-write by something other than this suite, a
    file edited by hand, a row of an older version)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UnreadableResult(f"{path}: not readable JSON ({error})") from None
    if not isinstance(data, dict) or any(key not in data for key in ("run_id", "status", "config")):
        raise UnreadableResult(f"{path}: not a result row (it needs run_id, status and config)")
    if data.get("schema_version") not in READS:
        raise UnreadableResult(f"{path}: schema_version {data.get('schema_version')!r}; "
                               f"this version reads {', '.join(map(str, READS))}")
    # Read as it is, such a row would still count as a seed whose numbers are missing (a final loss
    # averaged over fewer runs than the seeds column says, a run counted as never emerged).
    if data["status"] not in STATUSES:
        raise UnreadableResult(f"{path}: status {data['status']!r}; a row's status is one of {', '.join(STATUSES)}")
    broken = next((key for key in MAPPINGS if key in data and not isinstance(data[key], dict)), None)
    if broken is not None:
        raise UnreadableResult(f"{path}: {broken} is {json.dumps(data[broken])[:40]}, not a mapping as the suite "
                               f"writes it (a row edited by hand, or written by another tool)")
    return upgrade_row(cast(ResultRow, data))


def upgrade_row(row: ResultRow) -> ResultRow:
    """A row of schema 3. Schema 2's plateau section timed the first drop from chance as ``end_step``
    and ``censored``: they become ``first_drop_step`` and ``first_drop_censored``, and the held
    plateau's fields are read off the row's train-loss curve (absent where it kept none, so the
    row is left out of the held plateau's columns rather than counted as still held)."""
    if row.get("schema_version") != 2:
        return row
    old = dict(plateau_section(row))
    plateau = {k: v for k, v in old.items() if k not in ("end_step", "censored")}
    if "end_step" in old:
        plateau.update(first_drop_step=old["end_step"],
                       first_drop_censored=old.get("censored", old["end_step"] is None))
    points = section(row, "curves").get("train_loss") or []
    facts = section(row, "task_facts")
    if points and "chance_loss" in facts:
        plateau.update(plateau_fields([p[0] for p in points], [p[1] for p in points], facts["chance_loss"],
                                      facts.get("floor_loss", 0.0)))
    upgraded = {**row, "schema_version": SCHEMA_VERSION}
    if plateau or "plateau" in row:
        upgraded["plateau"] = plateau
    return cast(ResultRow, upgraded)


def _warn(error: UnreadableResult) -> None:
    print(f"warning: {error}; counted as unfinished (a resumed sweep runs it again)", file=sys.stderr)


def read_result(run_dir: str | Path) -> ResultRow | None:
    """The run's result row; None when it has none, or an unreadable one (named in a warning), so a
    resumed sweep runs it again."""
    path = Path(run_dir) / RESULT_FILE
    if not path.is_file():
        return None
    try:
        return parse_result(path)
    except UnreadableResult as error:
        _warn(error)
        return None


def is_finished(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` holds a finished row (ok or diverged: a sweep does not run it again)."""
    row = read_result(run_dir)
    return row is not None and row["status"] in FINISHED


def result_paths(root: str | Path, exclude: tuple[str, ...] = ()) -> list[Path]:
    """Every result file under ``root``, but those under its subfolders named in ``exclude``."""
    root = Path(root)
    return sorted(p for p in root.rglob(RESULT_FILE) if p.relative_to(root).parts[0] not in exclude)


def load_groups(root: str | Path) -> dict[str, list[ResultRow]]:
    """A results folder's rows by group: each subfolder holding runs (a sweep's groups; its tuning
    runs left out) under its name, and ``.`` for the runs directly under ``root``. A folder that does
    not exist or holds no row is bad input (ValueError)."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root} is not a results folder")
    groups: dict[str, list[ResultRow]] = {}
    direct = [child for child in sorted(root.iterdir()) if (child / RESULT_FILE).is_file()]
    if direct:
        groups["."] = [row for child in direct for row in load_records(child, quiet=True)]
    for child in sorted(root.iterdir()):
        if child.is_dir() and not (child / RESULT_FILE).is_file() and child.name != TUNING_DIR:
            if rows := load_records(child, quiet=True):
                groups[child.name] = list(rows)
    if not groups:
        raise ValueError(f"{root} holds no result rows")
    return groups


def load_records(root: str | Path, strict: bool = False, quiet: bool = False,
                 exclude: tuple[str, ...] = ()) -> list[ResultRow]:
    """Every readable result row under ``root`` (but its subfolders in ``exclude``). An unreadable one
    is named in a warning (unless ``quiet``) and left out (the rest is still aggregated); with
    ``strict`` it raises UnreadableResult instead (for CI)."""
    records: list[ResultRow] = []
    for path in result_paths(root, exclude):
        try:
            records.append(parse_result(path))
        except UnreadableResult as error:
            if strict:
                raise
            if not quiet:
                _warn(error)
    return records


def load(root: str | Path) -> pd.DataFrame:
    """Every result.json under ``root`` as one flat DataFrame (nested keys joined by dots)."""
    import pandas as pd  # here: every command imports the store, and most never need a DataFrame

    records = load_records(root)
    if not records:
        return pd.DataFrame()
    return pd.json_normalize(records)


def write_tables(folder: Path, tables: list[dict]) -> None:
    """Merge ``tables`` into ``folder``/tuning.json (a table per mixer and group; the newest wins)."""
    merged = {(t["mixer"], t["group"]): t for t in read_tables(folder) + tables}
    write_json(folder / TABLES_FILE, {"tables": [merged[k] for k in sorted(merged)]})


def read_tables(folder: Path) -> list[dict]:
    """The tuning tables in ``folder``/tuning.json; none where there is no file."""
    path = Path(folder) / TABLES_FILE
    return json.loads(path.read_text(encoding="utf-8"))["tables"] if path.is_file() else []


def none_works(table: dict) -> bool:
    """Whether no run of a tuning table emerged at any of its measured points: its choice is then the
    tie-break's (the smallest value), not an optimum, and is shown as "none works" wherever it is
    shown. (Read from the points, so a table written before the flag existed says so too.)"""
    measured = [p for p in table["points"] if p["area"] is not None]
    return bool(measured) and all(p["area"] == 0 for p in measured)
