"""The subcommands of `emergence-bench`, one module each: its parser and what it does, registered in
``COMMANDS`` when the module is imported. They are imported here in the order `emergence-bench --help`
lists them."""

# isort: off (their order is --help's)
from emergence_bench.commands import (  # noqa: F401  # noqa: F401
    analyze,
    check_mixer,
    claims,
    forecast,
    leaderboard,
    listing,
    rank,
    report,
    run,
    speed,
    sweep,
)
from emergence_bench.commands.command import COMMANDS, Command, Subparsers, register_command

# isort: on

__all__ = ["COMMANDS", "Command", "Subparsers", "register_command"]
