"""`emergence-bench leaderboard DIR`: the results under DIR aggregated over seeds, written beside
them as Markdown and CSV."""

from __future__ import annotations

import argparse
import sys

from emergence_bench.commands.arguments import add_results_dir, add_strict, results_in, writable_results
from emergence_bench.commands.command import Subparsers, register_command


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("leaderboard", help="aggregate the results under DIR over seeds",
                                   description="Aggregate the results under DIR over seeds (or --over keys), print "
                                               "the table, and write it as DIR/leaderboard.md, .csv and .json, "
                                               "replacing those of an earlier call. A read that fails (no readable "
                                               "result, an unknown --over key, --strict and an unreadable file) "
                                               "writes nothing.")
    add_results_dir(parser)
    parser.add_argument("--over", default="seed",
                        help="comma-separated config keys to aggregate over (default: seed)")
    parser.add_argument("--baseline", help="add ratio columns against the row with key=value, "
                                           "e.g. mixer=transformer or model.n_layers=1")
    add_strict(parser)
    return parser


def main(args: argparse.Namespace, extra: list[str]) -> int:
    folder = writable_results(results_in(args.dir), "leaderboard", "leaderboard.md, .csv and .json")

    from emergence_bench.reporting import leaderboard  # (pandas: after the arguments are checked)
    from emergence_bench.results.store import load_records, mixed_code_note

    over = tuple(k.strip() for k in args.over.split(",") if k.strip())
    table, markdown = leaderboard.write(folder, over, baseline=args.baseline, strict=args.strict)
    print(markdown, end="")
    print(f"\nwrote {folder / 'leaderboard.md'} and {folder / 'leaderboard.csv'} "
          f"({len(table)} rows)", file=sys.stderr)
    note = mixed_code_note(load_records(folder, quiet=True))
    if note:
        print(f"note: {note} (see each result's provenance, or the report's)", file=sys.stderr)
    return 0


register_command("leaderboard", add_parser, main, takes_extra=False)
