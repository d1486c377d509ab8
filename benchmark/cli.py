"""The `emergence-bench` command: list, run, sweep, leaderboard, rank, report, speed, analyze, forecast,
check-mixer.

Every config key can be given as a flag after the command, e.g.
``emergence-bench run --task.state_size 16 --mixer.n_heads 4 --trainer.max_steps 2000``.
"""

from __future__ import annotations

import argparse
import os
import select
import shlex
import sys
import traceback
import warnings
from importlib.metadata import PackageNotFoundError, version

from emergence_bench.commands import COMMANDS

EXIT_BAD_INPUT = 2  # a mistake in what was asked: one line on stderr names it (see expected_errors)
EXIT_BROKEN_PIPE = 141  # as a shell reports a process its pipe's reader left (128 + SIGPIPE)
EXIT_BUG = 70  # sysexits' EX_SOFTWARE: an unexpected error, printed with its traceback


def parser() -> argparse.ArgumentParser:
    """The command line: each registered command adds its own parser (emergence_bench.commands)."""
    p = argparse.ArgumentParser(prog="emergence-bench", description=__doc__, allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.add_parser(sub)
    return p


def _version() -> str:
    try:
        return version("emergence-bench")
    except PackageNotFoundError:
        return "(not installed)"


# Optional packages by import name: the extra that installs them (pyproject.toml).
EXTRAS = {"ray": "ray", "transformers": "pythia", "tokenizers": "pythia", "websocket": "browser", "wandb": "wandb"}


def warning_line(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 line: str | None = None) -> str:
    """A warning as the command prints it: one line, like its errors (not Python's file:line and source)."""
    return f"warning: {' '.join(str(message).split())}\n"


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    python_format, warnings.formatwarning = warnings.formatwarning, warning_line  # restored below
    argv = sys.argv[1:] if argv is None else list(argv)
    command_line = parser()
    args, extra = command_line.parse_known_args(argv)
    command = COMMANDS[args.command]
    if extra and not command.takes_extra:
        command_line.error(f"unrecognized arguments: {' '.join(extra)}")
    from emergence_bench.results import COMMAND_ENV

    before = os.environ.get(COMMAND_ENV)
    os.environ[COMMAND_ENV] = shlex.join(["emergence-bench", *argv])  # each result records it (sweep workers too)
    try:
        status = command.main(args, extra)
        sys.stdout.flush()  # a reader that left shows here, where it is handled, not at the exit's flush
        return status
    except expected_errors() as error:
        print(f"error: {' '.join(str(error).splitlines())}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError as error:
        if not output_reader_left():  # another pipe or socket (Chromium's, say) broke: a bug, shown as one
            return bug(error)
        # The reader closed the output (`list | head`): nothing to report, and nowhere to report it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (Python's flush at exit would fail too)
        return EXIT_BROKEN_PIPE
    except Exception as error:
        missing = (getattr(error, "name", None) or "").split(".")[0] if isinstance(error, ModuleNotFoundError) else ""
        if missing in EXTRAS:  # an optional package this command needs: say which extra installs it
            print(f"error: this needs the optional package {missing!r}: "
                  f".venv/bin/pip install -e '.[{EXTRAS[missing]}]'", file=sys.stderr)
            return EXIT_BAD_INPUT
        return bug(error)
    finally:  # main() may be called in a process that goes on (a test, a notebook)
        warnings.formatwarning = python_format
        if before is None:
            os.environ.pop(COMMAND_ENV, None)
        else:
            os.environ[COMMAND_ENV] = before


def bug(error: BaseException) -> int:
    """An unexpected error: its traceback and one line saying it is ours; EXIT_BUG."""
    traceback.print_exception(error)
    print("error: this is a bug in emergence-bench, not in your input: please report it with the command "
          "line and the traceback above", file=sys.stderr)
    return EXIT_BUG


def output_reader_left() -> bool:
    """Whether standard output is a pipe whose reading end has closed (poll reports an error on the
    writing end then); False for a file, a terminal, or a pipe still read."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's captured stdout)
        return False


def expected_errors() -> tuple[type[BaseException], ...]:
    """The errors that are the user's input, not a bug: a bad config, file, folder or results
    (ConfigError and UnreadableResult are ValueErrors, as are the tasks' and mixers' own checks of
    their parameters), an unknown name, a run another process holds. Each is one line: what is wrong
    and what would fix it. Anything else is unexpected and keeps its traceback."""
    from emergence_bench.registry import UnknownNameError

    # A run is held only once the engine has loaded: before, no RunBusy can have been raised, and
    # importing it (with Lightning) would cost a rejected typo seconds.
    engine = sys.modules.get("emergence_bench.engine.run_folder")
    return (ValueError, UnknownNameError) + ((engine.RunBusy,) if engine is not None else ())


if __name__ == "__main__":
    sys.exit(main())
