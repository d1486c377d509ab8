"""`emergence-bench check-mixer NAME`: is a mixer (e.g. a plugin) fit for the suite? The table of
the checks in ``mixer_checks`` (beside this module, imported when the command runs); exit status 1
if one fails."""

from __future__ import annotations

import argparse
from typing import Any

from emergence_bench.commands.arguments import config_overrides
from emergence_bench.commands.command import Subparsers, register_command

# mixer_checks' checks in its order, named here so that --help imports no torch (a test keeps them equal)
CHECK_NAMES = ("builds", "shape", "causal", "gradients", "deterministic", "state_dict", "attention", "seed_parallel",
               "learns", "noise", "speed")


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("check-mixer", allow_abbrev=False,
                                   help="is a mixer (e.g. your plugin) fit for the suite? a table of checks; "
                                        "its keys follow as --mixer.KEY VALUE",
                                   description="Check that a mixer is fit for the suite: one line per check, exit 1 "
                                               "if one fails. Its constructor's keys follow as flags, --mixer.KEY "
                                               "VALUE (e.g. --mixer.width 16); `emergence-bench list` names them.")
    parser.add_argument("name", help="the registered mixer name (`emergence-bench list`)")
    parser.add_argument("--skip", metavar="CHECKS",
                        help="comma-separated checks not to run, of: " + ", ".join(CHECK_NAMES) +
                             " (learns, noise and speed take the most time)")
    return parser


def main(args: argparse.Namespace, extra: list[str]) -> int:
    """`check-mixer NAME [--mixer.KEY VALUE ...]`: the table of mixer_checks' checks; 1 if one fails."""
    from emergence_bench import registry
    from emergence_bench.config import ConfigError

    registry.mixers.check(args.name)  # an unknown name is bad input (exit 2, with the closest name), not a failed check
    from emergence_bench.commands import mixer_checks  # (torch: after the name is checked)

    overrides: dict[str, Any] = {}
    for key, value in config_overrides(extra).items():
        if not key.startswith("mixer.") or key == "mixer.name":
            raise ConfigError(f"check-mixer takes the mixer's name, then its keys as --mixer.KEY VALUE; got --{key}")
        overrides[key[len("mixer."):]] = value
    skip = [c.strip() for c in (args.skip or "").split(",") if c.strip()]
    unknown = [c for c in skip if c not in mixer_checks.check_names()]
    if unknown:
        raise ConfigError(f"--skip: no check named {', '.join(unknown)}; "
                          f"checks: {', '.join(mixer_checks.check_names())}")
    mixer_checks.Subject(args.name, overrides).resolved  # so is a misspelt or mistyped key (resolving raises)
    results = mixer_checks.check_mixer(args.name, overrides, skip=skip)
    print(mixer_checks.render(args.name, results))
    return 1 if any(r.failed for r in results) else 0


register_command("check-mixer", add_parser, main)
