"""What several commands read from their command line alike: config keys given as flags, the
``--threads``, ``--batching`` and ``--workers`` flags, ``--strict``, numbers that must be finite, and
the results folder (one to read, one to write in)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

THREADS_HELP = ("torch threads per run: auto (default: 1 for small models, else the cores a run has) "
                "or N (= --trainer.threads N; not part of the run id)")
BATCHING_HELP = ("with --seed-parallel: auto (default) batches a group only where a short probe measures "
                 "it faster than one seed at a time; always batches")


def config_overrides(extra: list[str]) -> dict[str, Any]:
    """``["--task.state_size", "16", "--seed=3"]`` → {"task.state_size": 16, "seed": 3}."""
    from emergence_bench.config import ConfigError, parse_value

    overrides: dict[str, Any] = {}
    i = 0
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


def threads(text: str) -> int | str:
    """``--threads``: ``auto`` or a count (checked as trainer.threads)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--threads takes auto or a number of threads, got {text!r}") from None


CONFIG_FLAGS = ("Every config key can follow as a flag, --section.key VALUE: --task.state_size 16, --mixer.n_heads 4, "
                "--optim.lr 3e-3, --trainer.max_steps 2000, --callbacks.emergence.threshold 0.9 (a section at once: "
                "--mixer \"{name: mamba, d_state: 16}\"). `emergence-bench list` names every task's and mixer's keys; "
                "docs/configuration.md every section's.")


def add_results_dir(parser: argparse.ArgumentParser) -> None:
    """The ``DIR`` positional of the commands that read a results folder."""
    parser.add_argument("dir", metavar="DIR", help="a results folder: every result.json under it is read "
                                                   "(a sweep's --out, or run's)")


def add_strict(parser: argparse.ArgumentParser) -> None:
    """``--strict``, for the commands that read a results folder."""
    parser.add_argument("--strict", action="store_true",
                        help="an unreadable result.json is an error (default: a warning naming it; it is left out)")


def finite(text: str) -> float:
    """An argparse ``type`` for a number flag: a float, never NaN or ±inf (argparse names the flag)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


WORKERS_PER_CORE = 4  # more --workers than this many per core is refused: surely a slip, never faster


def check_workers(workers: int, flag: str = "--workers") -> None:
    """Worker processes that each train on a share of the cores: at least 1; above the cores, a
    warning (they only slow each other down); above WORKERS_PER_CORE × the cores, bad input."""
    from emergence_bench.config import ConfigError
    from emergence_bench.machine.threads import available_cpus

    cores = available_cpus()
    if workers < 1:
        raise ConfigError(f"{flag} must be a whole number ≥ 1, got {workers}")
    if workers > WORKERS_PER_CORE * cores:
        raise ConfigError(f"{flag} {workers} is more than {WORKERS_PER_CORE}× the {cores} core(s) this process may "
                          f"use: each worker trains on a share of the cores, so beyond {cores} they only slow each "
                          f"other down; use {flag} {cores} or fewer")
    if workers > cores:
        print(f"warning: {flag} {workers} > the {cores} core(s) this process may use: the workers share the cores "
              f"and each run trains slower; the sweep ends no sooner than with {flag} {cores}", file=sys.stderr)


def results_in(path: str) -> Path:
    """A results folder a command reads: one that exists, else bad input naming it."""
    if not Path(path).is_dir():
        raise ValueError(f"no such results directory: {path}")
    return Path(path)


def run_in(path: str) -> Path:
    """A run's folder a command reads: one holding the run's config, else bad input naming it."""
    from emergence_bench.results.store import CONFIG_FILE

    if not (Path(path) / CONFIG_FILE).is_file():
        raise ValueError(f"{path} is not a run directory (no {CONFIG_FILE})")
    return Path(path)


def results_folder(path: str | Path) -> Path:
    """``path`` created (with its parents) for results, and checked writable (``writable``); a path
    that cannot be is bad input."""
    from emergence_bench.config import ConfigError

    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"cannot create the results folder {path}: {error.strerror or error} "
                          f"(choose another --out)") from None
    return writable(path, "choose another --out", "the results folder ")


def writable(folder: str | Path, advice: str, what: str = "") -> Path:
    """``folder`` if this process may create files in it (checked by creating one and removing it):
    before a command computes anything, so a read-only folder (a read-only filesystem, no permission)
    is one line, ``cannot write in {what}{folder}: <cause> (<errno>); <advice>``, not a failure at
    its first write. A folder that does not exist yet is checked at its nearest existing parent (the
    one its creation would write in); a file there is bad input too."""
    import errno
    import os
    import tempfile

    from emergence_bench.config import ConfigError
    from emergence_bench.results.atomic import DISK_ERRORS

    folder = Path(folder)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"cannot write in {what}{folder}: {existing} is a file, not a folder; {advice}")
    try:
        handle, name = tempfile.mkstemp(prefix=".write-check-", dir=existing)
    except OSError as error:
        if error.errno not in (*DISK_ERRORS, errno.ENOENT):  # ENOENT: a folder that holds no files (/proc)
            raise
        raise ConfigError(f"cannot write in {what}{folder}: {os.strerror(error.errno)} "
                          f"({errno.errorcode[error.errno]}); {advice}") from None
    os.close(handle)
    os.unlink(name)
    return folder


def writable_results(folder: Path, command: str, files: str, out_flag: bool = False) -> Path:
    """The results folder ``command`` read, checked writable for the ``files`` it writes beside them
    (``writable``); the advice names ``--out`` where the command has one."""
    return writable(folder, f"`emergence-bench {command}` writes {files} there: "
                            + ("give --out a writable place, or " if out_flag else "")
                            + f"run it on a writable copy (cp -r {folder} COPY; emergence-bench {command} COPY)")
