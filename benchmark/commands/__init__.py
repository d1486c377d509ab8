"""The subcommands of `emergence-bench`, one module each: its parser and what it does, registered in
``COMMANDS`` when the module is imported. They are imported here in the order `emergence-bench --help`
lists them. Two modules are not commands: ``mixer_checks`` (the checks `check-mixer` runs, imported
when it runs) and ``reference_build`` (a maintainer's, run as a module)."""

from emergence_bench.commands.command import COMMANDS, Command, Subparsers, register_command

# Their order is --help's, so isort leaves them as written:
# isort: off
from emergence_bench.commands import listing, run, sweep, leaderboard, rank, report, claims  # noqa: F401
from emergence_bench.commands import analyze, lm_family, forecast, speed, check_mixer  # noqa: F401
# isort: on

__all__ = ["COMMANDS", "Command", "Subparsers", "register_command"]
