"""`emergence-bench claims DIR`: the paper's claims judged on the results under DIR (a
``claims-cpu-v2`` sweep, the replication's ``claims-cpu-replication``, or
``claims-cpu-v2-recurrent``'s recurrent mixers at their own lr: each stage DIR holds, its own Holm
family), printed and written beside them as claims.md, claims.csv and claims.json. With
``--reference``, a claims reference's rows fill the groups DIR lacks (``claims.reference``);
``--save-reference`` writes one from DIR."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from emergence_bench.commands.arguments import add_results_dir, results_in, writable_results
from emergence_bench.commands.command import Subparsers, register_command


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("claims", help="the paper's claims as pre-registered tests: a scorecard of DIR",
                                   description="Judge the paper's claims on the results under DIR (a claims-cpu-v2 "
                                               "sweep, the replication's claims-cpu-replication, or "
                                               "claims-cpu-v2-recurrent's own-lr rerun: each stage DIR "
                                               "holds, Holm-adjusted on its own), print the scorecard, and write it as "
                                               "DIR/claims.md, .csv and .json (docs/claims.md).")
    add_results_dir(parser)
    parser.add_argument("--claim", action="append", metavar="ID",
                        help="print only this claim's rows, judged among all of them (repeatable; docs/claims.md "
                             "names them); the files hold the whole scorecard")
    parser.add_argument("--patch", action="store_true",
                        help="first patch the patching group's runs that emerged between two checkpoints (torch; "
                             "the reports are kept in each run's analysis/ folder, and the judgement reads them)")
    parser.add_argument("--reference", metavar="builtin|FILE",
                        help="judge with a claims reference's rows (claims-cpu-v2's first stage: `builtin`, the "
                             "shipped one, or a file) filling every group (and mixer) DIR lacks; DIR's own runs "
                             "of a group always win; on an empty DIR, the reference's scorecard")
    parser.add_argument("--save-reference", metavar="FILE", nargs="?", const="",
                        help="instead of judging, write DIR's claims-cpu-v2 rows as a claims reference (a "
                             "maintainer's step; default FILE: the shipped one, "
                             "benchmark/presets/reference/claims-cpu-v2.json.gz)")
    return parser


TOP_K = 16  # the heads patched: K = 1…16 are reported


def patch_folder(folder: Path) -> int:
    """The explicit patching step: for each confirmation run of ``folder``'s patching group (the first
    stage's or a replication's, ``claims.judge.patching_runs``) whose emergence two adjacent
    checkpoints bracket, writes the reports ``analyze patch`` gives (the top 1…16 heads of the
    post-emergence checkpoint into the pre-emergence one, and the ground truth) where they are not on
    disk yet; returns how many it wrote. The judgement only reads them."""
    from emergence_bench.analysis.checkpoint_analysis import load_run, patch
    from emergence_bench.claims.judge import PATCHING_GROUP, patching_runs, rows_by_group
    from emergence_bench.claims.patching import bracket
    from emergence_bench.results.row import emergence_step
    from emergence_bench.results.store import ANALYSIS_DIR

    patched = 0
    for row in patching_runs(rows_by_group(folder, quiet=True).get(PATCHING_GROUP, [])):
        if emergence_step(row) is None:
            continue
        run_dir = folder / PATCHING_GROUP / row["run_id"]
        try:
            _, _, checkpoints = load_run(run_dir)
        except ValueError:  # no checkpoints (it failed early) or no config: nothing to patch
            continue
        steps = bracket(row, sorted(checkpoints))
        if steps is None:
            continue
        old, new = steps
        for truth in (False, True):
            name = f"patch_{old}_{new}" + ("_ground_truth" if truth else "") + ".json"
            if not (run_dir / ANALYSIS_DIR / name).is_file():
                patch(run_dir, old, new, top_k=TOP_K, ground_truth=truth, device="cpu")
                patched += 1
    return patched


def save_reference(folder: Path, out: str) -> int:
    """``--save-reference``: DIR's runs of the preset written as a claims reference (``claims.reference``)."""
    from emergence_bench.claims import reference
    from emergence_bench.results import packed

    built = reference.build(folder)
    target = Path(out) if out else reference.SHIPPED
    size = packed.write(built, target)
    print(f"wrote {target}: {built['runs']} runs in {len(built['rows'])} groups, {size / 1e6:.2f} MB, design sha256 "
          f"{built['sha256'][:12]}, commit {built['commit']}")
    return 0


def main(args: argparse.Namespace, extra: list[str]) -> int:
    if args.save_reference is not None and args.reference:
        raise ValueError("--save-reference writes a reference from DIR; it does not judge with --reference")
    folder = writable_results(results_in(args.dir), "claims", "claims.md, .csv and .json")
    if args.save_reference is not None:
        return save_reference(folder, args.save_reference)

    from emergence_bench.claims import claims
    from emergence_bench.claims.claim import CLAIMS

    claims()  # declares the built-in claims, so --claim can name them
    only = [CLAIMS.get(name) for name in args.claim] if args.claim else None  # judged among all: one Holm family
    from emergence_bench.claims import judge, reference

    shipped = reference.load(args.reference) if args.reference else None  # a bad file: one line, nothing written
    from emergence_bench.reporting import scorecard

    if args.patch:
        print(f"patched {patch_folder(folder)} report(s)", file=sys.stderr)  # (pandas: after the arguments are checked)

    rows = reference.rows(shipped) if shipped else None
    stage = shipped["stage"] if shipped else ""
    groups = judge.read_folder(folder, rows)
    card = judge.judge_read(folder, groups, shipped=rows, stage=stage)
    note = reference.taken_line(shipped, judge.filled(groups, rows, stage)[1]) if shipped and rows else ""
    rows_out, markdown = scorecard.write(folder, card, only, note)
    print(markdown, end="")
    if note:
        print(f"\n{note}")
    print(f"\nwrote {folder / 'claims.md'} (with the paper's words, each test and its details), claims.csv and "
          f"claims.json", file=sys.stderr)
    return 0


register_command("claims", add_parser, main, takes_extra=False)
