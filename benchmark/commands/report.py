"""`emergence-bench report DIR`: one self-contained HTML page of the results under DIR; with
``--screenshot``, checked in a headless browser."""

from __future__ import annotations

import argparse
from pathlib import Path

from emergence_bench.commands.arguments import add_results_dir, add_strict, results_in, writable, writable_results
from emergence_bench.commands.command import Subparsers, register_command


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("report", help="write one self-contained HTML report of the results under DIR",
                                   description="Write one self-contained HTML page of the results under DIR "
                                               "(default DIR/report.html, replacing an earlier one), its figures "
                                               "also as PNG and SVG in report_figures/ beside it; docs/report.md "
                                               "says what each figure shows.")
    add_results_dir(parser)
    parser.add_argument("--out", help="HTML file to write (default: DIR/report.html)")
    parser.add_argument("--axes", help="two config keys for the heatmap, e.g. task.state_size,task.sparsity")
    parser.add_argument("--maps", type=int, default=4, help="groups drawn in the staircase and in the attention-map "
                                                            "figures (default 4; the captions say how many there are)")
    parser.add_argument("--over", default="seed", help="config keys to aggregate over (default: seed)")
    parser.add_argument("--seed", type=int, help="the seed the staircase and the filmstrip show "
                                                 "(default: each group's median-emergence seed)")
    parser.add_argument("--reference", metavar="builtin|FILE",
                        help="rank the mixers DIR lacks from shipped reference results, as `rank --reference` does: "
                             "the ranking, tuning curves, survival, forest and state figures show DIR's mixer "
                             "(a plugin) beside the built-ins (default: the reference DIR/rank.json was ranked "
                             "against, if any)")
    parser.add_argument("--screenshot", action="store_true",
                        help="open the page in headless Chromium: check every figure loaded and nothing logged an "
                             "error, and save a full-page screenshot beside it (report.png)")
    parser.add_argument("--figures", help="the figures to draw, comma-separated, of: curves, staircase, seeds, "
                                          "ranking, axes, thresholds, heatmap, filmstrip, maps, claims, language "
                                          "(default: every one the results allow)")
    add_strict(parser)
    return parser


def main(args: argparse.Namespace, extra: list[str]) -> int:
    results_in(args.dir)
    axes = tuple(a.strip() for a in args.axes.split(",")) if args.axes is not None else None
    if axes is not None and (len(axes) != 2 or not all(axes)):
        raise ValueError(f"--axes takes two config keys, e.g. task.state_size,task.sparsity; got {args.axes!r}")
    over = tuple(k.strip() for k in args.over.split(",") if k.strip())
    figures = tuple(f.strip() for f in args.figures.split(",") if f.strip()) if args.figures is not None else None
    if figures is not None and not figures:
        raise ValueError("--figures takes figure names, comma-separated (e.g. curves,ranking); got ''; "
                         "leave it out for every figure the results allow")
    if args.out is not None and Path(args.out).is_dir():
        raise ValueError(f"--out {args.out} is a folder: give the HTML file to write, "
                         f"e.g. {Path(args.out) / 'report.html'}")
    if args.out is not None:
        writable(Path(args.out).parent, f"choose another --out than {args.out}")
    else:
        writable_results(Path(args.dir), "report", "report.html and its figures", out_flag=True)
    from emergence_bench.reporting import report  # (pandas, matplotlib and torch: after the arguments are checked)

    path = report.write(args.dir, args.out, axes=axes, maps=args.maps, over=over, strict=args.strict,
                        figures=figures, seed=args.seed, reference=args.reference)
    print(f"report: {path}")
    if not args.screenshot:
        return 0
    from emergence_bench.reporting.browser import check_page, find_browser

    if find_browser() is None:
        raise ValueError("--screenshot needs a headless browser: none of chromium, google-chrome on PATH "
                         "(on Debian: apt-get install chromium)")
    shot = path.with_suffix(".png")
    check = check_page(path, shot)
    print(f"screenshot: {shot} ({len(check.images)} figures, all loaded)" if check.ok else
          f"screenshot: {shot}; in the browser: figures that did not load: {', '.join(check.broken) or 'none'}; "
          f"errors logged: {'; '.join(check.errors) or 'none'}")
    return 0 if check.ok else 1


register_command("report", add_parser, main, takes_extra=False)
