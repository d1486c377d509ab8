"""`emergence-bench rank DIR`: the mixers under DIR ranked by their frontier and area on each task
family's difficulty ladder."""

from __future__ import annotations

import argparse
import sys

from emergence_bench.commands.arguments import add_results_dir, add_strict, results_in, writable_results
from emergence_bench.commands.command import Subparsers, register_command


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("rank", help="rank the mixers under DIR: frontier and area per task family's ladder",
                                   description="Rank the mixers under DIR by their frontier and area on each task "
                                               "family's ladder (docs/ranking.md), print the tables, and write them "
                                               "as DIR/rank.md, .csv and .json, replacing those of an earlier call. "
                                               "A read that fails (no readable result, no run finished ok, an "
                                               "unknown --rung family) writes nothing. With --against OTHER, "
                                               "also compare DIR's results with OTHER's, cell by cell and tier by "
                                               "tier, print it and write it as DIR/reproduction.md and .json; the "
                                               "comparison is made first, so one that fails (e.g. no cell in "
                                               "common) is one line and writes nothing, the earlier rank.* kept.")
    add_results_dir(parser)
    parser.add_argument("--rung", action="append", metavar="FAMILY=KEY",
                        help="the ladder's task key of a family where several vary (repeatable)")
    parser.add_argument("--baseline", help="the mixer the plateau ratios divide by (default: transformer)")
    parser.add_argument("--reference", metavar="builtin|FILE",
                        help="rank against shipped reference results for the mixers DIR lacks: `builtin` (the "
                             "built-in mixers on the standard CPU ladder) or a reference file")
    parser.add_argument("--against", metavar="OTHER",
                        help="a results folder of the same ladder (other seeds, or the same seeds with "
                             "trainer.batch_order: reversed): compare DIR with it (per cell: success counts, "
                             "Fisher's p, the median emergence step; the tiers), written as DIR/reproduction.md "
                             "and .json; only the two folders' own results are compared, never --reference's")
    add_strict(parser)
    return parser


def main(args: argparse.Namespace, extra: list[str]) -> int:
    folder = results_in(args.dir)
    other = results_in(args.against) if args.against is not None else None
    axes = {}
    for spec in args.rung or []:
        family, _, key = spec.partition("=")
        if not family or not key:
            raise ValueError(f"--rung takes FAMILY=KEY, e.g. linear_map=task.sparsity; got {spec!r}")
        axes[family] = key if "." in key else f"task.{key}"
    writable_results(folder, "rank", "rank.md, .csv and .json" + (" and reproduction.md and .json" if other else ""))
    from emergence_bench.reporting import rank  # (pandas: after the arguments are checked)
    from emergence_bench.results.atomic import write_files

    if other is not None:  # compared first: a comparison that fails leaves the earlier rank.* as they were
        from emergence_bench.reporting import reproduction

        # DIR's unreadable files are named once, by its ranking below.
        comparison, text = reproduction.compared(folder, other, axes, strict=args.strict, quiet=True)
    ranked, markdown, files = rank.ranked(folder, axes, strict=args.strict, baseline=args.baseline,
                                          reference_name=args.reference)
    if other is not None:
        files.update(reproduction.files(folder, other, comparison, text))
    write_files(files)  # at the end, all together: a command that fails leaves the earlier files as they were
    print(markdown, end="")
    print(f"\nwrote {folder / 'rank.md'}, rank.csv and rank.json ({len(ranked['ranking'])} mixers, "
          f"{len(ranked['cells'])} cells)", file=sys.stderr)
    if other is not None:
        print("\n" + text, end="")
        print(f"\nwrote {folder / (reproduction.STEM + '.md')} and {reproduction.STEM}.json "
              f"({comparison['summary']['cells']} cells compared)", file=sys.stderr)
    return 0


register_command("rank", add_parser, main, takes_extra=False)
