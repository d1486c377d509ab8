"""A subcommand of `emergence-bench`, and the registry every command joins (in the order `--help`
lists them): the central parser is a loop over it (emergence_bench.cli)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from emergence_bench.registry import Registry

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


@dataclass(frozen=True)
class Command:
    """``add_parser(subparsers)`` adds the command's parser (its name, help and arguments) and
    returns it; ``main(args, extra)`` runs it and returns the exit status. ``extra`` holds the flags
    the parser does not know: config keys (``--dotted.key VALUE``). Where ``takes_extra`` is False,
    they are refused before the command runs, as argparse refuses a flag it does not know."""

    add_parser: Callable[[Subparsers], argparse.ArgumentParser]
    main: Callable[[argparse.Namespace, list[str]], int]
    takes_extra: bool = True


COMMANDS: Registry[Command] = Registry("command", Command)


def register_command(name: str, add_parser: Callable[[Subparsers], argparse.ArgumentParser],
                     main: Callable[[argparse.Namespace, list[str]], int], takes_extra: bool = True) -> Command:
    """Registers the command ``name`` (the name its ``add_parser`` gives it)."""
    return COMMANDS.add(name, Command(add_parser, main, takes_extra))
