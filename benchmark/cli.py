"""The `emergence-bench` command line: one parser, a loop over the registered commands
(``emergence_bench.commands``); every mistake in it one ``error:`` line, every bug its traceback."""

from __future__ import annotations

import argparse
import difflib
import os
import select
import shlex
import sys
import textwrap
import traceback
import warnings
from importlib.metadata import PackageNotFoundError, version
from typing import Any, NoReturn, cast

from emergence_bench.commands import COMMANDS, Subparsers

EXIT_BAD_INPUT = 2  # a mistake in what was asked: one line on stderr names it (see expected_errors)
EXIT_BROKEN_PIPE = 141  # as a shell reports a process its pipe's reader left (128 + SIGPIPE)
EXIT_BUG = 70  # sysexits' EX_SOFTWARE: an unexpected error, printed with its traceback


class Parser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is one line, as every other mistake is: ``error: <what>
    (see: emergence-bench COMMAND --help)``, exit 2, not the usage block first. The commands' parsers
    are of this class too (argparse makes a subparser of its parent's class)."""

    def error(self, message: str) -> NoReturn:
        usage_error(self.prog, message)

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        # An empty value (`--mixers ''`, `--config ''`, a DIR of '') names nothing: refused, never read
        # as "not given" (the default) nor as the current folder.
        if arg_string == "" and action.nargs != argparse.PARSER:
            raise argparse.ArgumentError(action, "an empty value names nothing: give one"
                                         + (", or leave the flag out" if action.option_strings else ""))
        return super()._get_value(action, arg_string)


def usage_error(prog: str, message: str) -> NoReturn:
    """A mistake in the command line's shape, as one ``error:`` line pointing to ``PROG --help``."""
    print(f"error: {' '.join(message.split())} (see: {prog} --help)", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)


def no_command_first(argv: list[str]) -> tuple[str, str] | None:
    """A command line that does not start with a command, as (the prog whose --help to see, the line
    that says what is wrong): flags before the command (``emergence-bench --workers 2 sweep quick``;
    every flag but --help and --version follows its command), or a word that is no command (the
    closest named). None where it starts with a command, --help or --version."""
    top = ("-h", "--help", "--version")
    if not argv or argv[0] in COMMANDS or argv[0] in top:
        return None
    first = next((i for i, arg in enumerate(argv) if arg in COMMANDS), None)
    if argv[0].startswith("-"):
        if first is None:
            return "emergence-bench", (f"{argv[0]} comes before any command: a command comes first and its flags "
                                       f"follow it (commands: {', '.join(COMMANDS)})")
        if any(arg in top for arg in argv[:first]):
            return None
        before, command = " ".join(argv[:first]), argv[first]
        return f"emergence-bench {command}", (f"{before} comes before the command {command}: flags follow the "
                                              f"command, as in emergence-bench {command} {before} ...")
    close = difflib.get_close_matches(argv[0], list(COMMANDS), n=1)
    return "emergence-bench", (f"no command {argv[0]!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                               + f"; commands: {', '.join(COMMANDS)}")


def parser() -> argparse.ArgumentParser:
    """The command line: each registered command adds its own parser (emergence_bench.commands)."""
    p = Parser(prog="emergence-bench", description=description(), allow_abbrev=False,
               formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    # Its parsers are Parsers (argparse makes them of the parent's class), which the commands take as any parser.
    sub = cast(Subparsers, p.add_subparsers(dest="command", required=True))
    for command in COMMANDS.values():
        command.add_parser(sub)
    return p


def description() -> str:
    """`--help`'s description: every registered command, in its order (so none is left out of it)."""
    return (textwrap.fill(f"The `emergence-bench` commands: {', '.join(COMMANDS)}; each with --help.", 100,
                          break_on_hyphens=False) + "\n\n"
            "Every config key can be given as a flag after the command, e.g.\n"
            "``emergence-bench run --task.state_size 16 --mixer.n_heads 4 --trainer.max_steps 2000``.")


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
    misplaced = no_command_first(argv)
    if misplaced is not None:
        usage_error(*misplaced)
    command_line = parser()
    args, extra = command_line.parse_known_args(argv)
    command = COMMANDS[args.command]
    if extra and not command.takes_extra:
        usage_error(f"emergence-bench {args.command}", f"unrecognized arguments: {' '.join(extra)}")
    from emergence_bench.results.store import COMMAND_ENV

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
