"""`emergence-bench speed`: speed ratios measured side by side on this machine (emergence_bench.perf)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from emergence_bench import registry
from emergence_bench.commands.arguments import writable
from emergence_bench.commands.command import Subparsers, register_command


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("speed", help="speed ratios measured side by side on this machine",
                                   description="Time the suite on this machine, each ratio from two timings taken "
                                               "side by side in one process: the suite's step against a bare loop, "
                                               "seed-parallel groups against one seed, each mixer's step and one "
                                               "ranking cell against the Transformer's (docs/speed.md). Prints the "
                                               "tables and writes them as JSON; a full run takes many minutes, "
                                               "--quick: seconds.")
    parser.add_argument("--out", default="speed.json", help="where to write the table as JSON (default: speed.json)")
    parser.add_argument("--lengths", default=None, help="the mixer table's sequence lengths (comma-separated; "
                        "default 16,64,256, with --quick 16)")
    parser.add_argument("--mixers", default=None, help="the mixers of the mixer tables (comma-separated; default: "
                        "the built-in ones); --quick honours it")
    parser.add_argument("--cell-steps", type=int, default=100,
                        help="steps of each ranking cell the cell clock times (default 100)")
    parser.add_argument("--no-cells", action="store_true", help="leave out the ranking-cell clock")
    parser.add_argument("--repeats", type=int, default=5,
                        help="interleaved repeats per ratio (≥ 5, default 5; the median and range are printed)")
    parser.add_argument("--steps", type=int, default=100,
                        help="timed training steps per suite measurement (default 100)")
    parser.add_argument("--seeds", default="1,4,16",
                        help="seed-parallel group sizes K (comma-separated; default 1,4,16)")
    parser.add_argument("--forms", action="store_true",
                        help="only the forms table: each float-order form of Gated DeltaNet and mLSTM against the "
                             "one ladder v2 ran, at the ranking's lengths (a few minutes)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run of the same code, in seconds: 2 interleaved repeats of 2-step blocks, "
                             "K 1 and 2, length 16, no spread to read (timings not to quote)")
    return parser


def main(args: argparse.Namespace, extra: list[str]) -> int:
    try:
        lengths = tuple(int(n) for n in args.lengths.split(",")) if args.lengths else None
        seeds = tuple(int(n) for n in args.seeds.split(","))
    except ValueError:
        raise ValueError(f"--lengths and --seeds take comma-separated whole numbers, got {args.lengths!r} and "
                         f"{args.seeds!r}") from None
    mixers = [m.strip() for m in args.mixers.split(",") if m.strip()] if args.mixers is not None else None
    if mixers == []:
        raise ValueError(f"--mixers takes mixer names, comma-separated, got {args.mixers!r}; leave it out for the "
                         "built-in ones")
    if Path(args.out).is_dir():
        raise ValueError(f"--out {args.out} is a folder: give the JSON file to write, "
                         f"e.g. {Path(args.out) / 'speed.json'}")
    writable(Path(args.out).parent, f"choose another --out than {args.out}")  # before minutes of timing
    if unknown := [name for name in mixers or [] if name not in registry.mixers.known()]:
        raise ValueError(f"--mixers: unknown mixer(s) {', '.join(unknown)}; "
                         f"known: {', '.join(registry.mixers.known())}")
    from emergence_bench.perf import speed  # (torch: after the arguments are checked)

    if args.forms:
        speed.forms_main(args.out, lengths=lengths, repeats=args.repeats)
        print(f"wrote {args.out}", file=sys.stderr)
        return 0
    speed.main(args.out, lengths=lengths, repeats=args.repeats, quick=args.quick, steps=args.steps, seeds=seeds,
               mixers=mixers, cells=not args.no_cells, cell_steps=args.cell_steps)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


register_command("speed", add_parser, main, takes_extra=False)
