"""What several commands read from their command line alike: config keys given as flags, the
``--threads`` and ``--batching`` flags, ``--strict``, and the results folder."""

from __future__ import annotations

import argparse
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


def results_in(path: str) -> Path:
    """A results folder a command reads: one that exists, else bad input naming it."""
    if not Path(path).is_dir():
        raise ValueError(f"no such results directory: {path}")
    return Path(path)


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
