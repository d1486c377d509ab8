"""`emergence-bench claims DIR`: the paper's claims judged on the results under DIR (a
``claims-cpu-v2`` sweep), printed and written beside them as claims.md, claims.csv and claims.json."""

from __future__ import annotations

import argparse
import sys

from emergence_bench.commands.arguments import add_results_dir, results_in, writable_results
from emergence_bench.commands.command import Subparsers, register_command


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("claims", help="the paper's claims as pre-registered tests: a scorecard of DIR",
                                   description="Judge the paper's claims on the results under DIR (a claims-cpu-v2 "
                                               "sweep), print the scorecard, and write it as DIR/claims.md, .csv and "
                                               ".json (docs/claims.md).")
    add_results_dir(parser)
    parser.add_argument("--claim", action="append", metavar="ID",
                        help="print only this claim's rows, judged among all of them (repeatable; docs/claims.md "
                             "names them); the files hold the whole scorecard")
    return parser


def main(args: argparse.Namespace, extra: list[str]) -> int:
    folder = writable_results(results_in(args.dir), "claims", "claims.md, .csv and .json")

    from emergence_bench.claims import claims
    from emergence_bench.claims.claim import CLAIMS

    claims()  # declares the built-in claims, so --claim can name them
    only = [CLAIMS.get(name) for name in args.claim] if args.claim else None  # judged among all: one Holm family
    from emergence_bench.reporting import scorecard  # (pandas: after the arguments are checked)

    rows, markdown = scorecard.write(folder, only)
    print(markdown, end="")
    print(f"\nwrote {folder / 'claims.md'} (with the paper's words, each test and its details), claims.csv and "
          f"claims.json", file=sys.stderr)
    return 0


register_command("claims", add_parser, main, takes_extra=False)
