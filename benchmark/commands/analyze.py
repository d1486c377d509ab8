"""`emergence-bench analyze`: when did a capability emerge, and which heads carry it?

    analyze emergence RUN_DIR [--probe-batches N]     bisect the saved checkpoints for the first that
                                                      solves the task -> RUN_DIR/analysis/emergence.json
    analyze patch RUN_DIR --old STEP --new STEP       causal head patching between two checkpoints
          [--top-k K] [--ground-truth]                -> RUN_DIR/analysis/patch_<old>_<new>[_ground_truth].json
    analyze pythia --model NAME_OR_PATH --probe NAME  the same on Pythia checkpoints with a language probe
          [--revisions step0 step1000 ...] [--out DIR] -> DIR/<run id>/result.json (a leaderboard row)
          [--lexicon shakespeare] [--curve] [--head-scores]
    analyze abruptness DIR [--surrogates N]           the abruptness rule checked on a folder's curves:
                                                      per group, abrupt cells by the rule and the share,
                                                      onset and width, eval noise, onset against share,
                                                      the surrogate null -> DIR/abruptness-check.json
    analyze calibration DIR                           a ladder's calibration table: per group and setting,
                                                      emerged, held plateaus worth the name, abrupt cells
                                                      by the rule -> DIR/calibration.md
    analyze budget DIR [--assume-workers N]           where a sweep's time went: worker time per stage,
                                                      group and mixer, and its censored tail -> DIR/budget.md
    analyze ablation DIR --control GROUP              a declared two-arm comparison of two groups of DIR,
          --treatment GROUP                           per mixer: emerged counts (Fisher, Holm over the
                                                      mixers), Kaplan-Meier medians, the sign test over
                                                      seed pairs, and the verdict
                                                      -> DIR/ablation.md, DIR/ablation.json

"Solves" is the run's own emergence criterion: greedy accuracy on the scored tokens of the probe set
(the task's eval batches) ≥ the emergence callback's threshold. The work is in
``emergence_bench.analysis`` (checkpoint_analysis, pythia), imported when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from emergence_bench.commands.arguments import finite, run_in, writable, writable_results
from emergence_bench.commands.command import Subparsers, register_command


# --- printing ----------------------------------------------------------------------------------
def _fraction(value: float | None) -> str:
    return "n/a (no gap)" if value is None else f"{value:.3f}"


def print_patch(report: dict, heads_shown: int = 8) -> None:
    source = "ground truth" if report["source"] == "ground_truth" else f"step {report['new']}"
    print(f"patching {source} into step {report['old']}: p(correct) old {report['p_old']:.4f}, "
          f"new {report['p_new']:.4f}, gap {report['gap']:+.4f}")
    print("rank  layer  head  delta_p   fraction")
    for row in report["heads"][:heads_shown]:
        print(f"{row['rank']:>4}  {row['layer']:>5}  {row['head']:>4}  {row['delta_p']:+.4f}  "
              f"{_fraction(row['fraction_recovered'])}")
    for row in report["top_k"]:
        heads = " ".join(f"L{layer}H{head}" for layer, head in row["heads"])
        print(f"top {row['k']} ({heads}): delta_p {row['delta_p']:+.4f}, "
              f"gap recovered {_fraction(row['fraction_recovered'])}")
    a = report["all_heads"]
    print(f"all {a['k']} heads: delta_p {a['delta_p']:+.4f}, gap recovered {_fraction(a['fraction_recovered'])}")


# --- command line -------------------------------------------------------------------------------
def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Add the `analyze` command (and its subcommands) to a CLI's subparsers."""
    from emergence_bench.analysis.language_probes import LEXICONS, PROBES

    p = subparsers.add_parser("analyze", help="emergence bisection and causal head patching (runs and Pythia)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="analysis", required=True)

    e = sub.add_parser("emergence", help="bisect a run's checkpoints for the first that solves the task")
    e.add_argument("run_dir", metavar="RUN_DIR", help="one run's folder (DIR/<run id>), its checkpoints saved")
    e.add_argument("--probe-batches", type=int, help="eval batches in the probe set (default: the run's eval_batches)")
    e.add_argument("--threshold", type=finite,
                   help="accuracy that counts as solved (default: the run's emergence threshold)")
    e.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto)")

    pa = sub.add_parser("patch", help="patch heads' attention maps from a later checkpoint into an earlier one")
    pa.add_argument("run_dir", metavar="RUN_DIR", help="one run's folder (DIR/<run id>), its checkpoints saved")
    pa.add_argument("--old", type=int, required=True, help="pre-emergence checkpoint step")
    pa.add_argument("--new", type=int, required=True, help="post-emergence checkpoint step")
    pa.add_argument("--top-k", type=int, default=4, help="patch the top 1..K heads together (default 4)")
    pa.add_argument("--ground-truth", action="store_true",
                    help="patch in the task's ground-truth pattern (row-normalised) instead of the new model's maps")
    pa.add_argument("--probe-batches", type=int, default=1, help="eval batches in the probe batch (default 1)")
    pa.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto)")

    ab = sub.add_parser("abruptness", help="check the abruptness rule on a results folder's curves")
    ab.add_argument("folder", metavar="DIR", help="a results folder (a sweep's --out)")
    ab.add_argument("--surrogates", type=int, default=20,
                    help="smooth surrogates per curve for the null (default 20; 0 skips it)")

    ca = sub.add_parser("calibration", help="a calibration screen's table: emergence, held plateaus, abrupt cells")
    ca.add_argument("folder", metavar="DIR", help="a results folder (a calibration sweep's --out)")

    bu = sub.add_parser("budget", help="where a sweep's time went: worker time per stage, group and mixer")
    bu.add_argument("folder", metavar="DIR", help="a results folder (a sweep's --out)")
    bu.add_argument("--assume-workers", type=int, default=2, dest="workers",
                    help="workers the wall-time bound divides the worker time by (default 2)")

    ai = sub.add_parser("ablation", help="a declared two-arm comparison of two groups, per mixer: does the "
                                         "treatment emerge in fewer runs, or later?")
    ai.add_argument("folder", metavar="DIR", help="a results folder whose groups (subfolders) are the arms")
    ai.add_argument("--control", required=True, metavar="GROUP", help="the control arm's group (with-conv)")
    ai.add_argument("--treatment", required=True, metavar="GROUP", help="the treatment arm's group (without-conv)")

    py = sub.add_parser("pythia", help="bisect and patch Pythia (GPT-NeoX) checkpoints on a language probe")
    py.add_argument("--model", required=True,
                    help="hub name (EleutherAI/pythia-70m) or local folder of step*/ revisions")
    py.add_argument("--probe", required=True, choices=sorted(PROBES), help="the probe set")
    py.add_argument("--revisions", nargs="+",
                    help="checkpoints to search, e.g. step0 step1000 (default: the local folder's step*/ or "
                         "Pythia's 154 published steps)")
    py.add_argument("--out", default="runs/pythia", help="results directory (default runs/pythia)")
    py.add_argument("--prompts", type=int, default=64, help="prompts in the probe set (default 64)")
    py.add_argument("--single", action="store_true", help="the paper's single-prompt mode")
    py.add_argument("--probe-seed", type=int, default=0, help="seed of the templated prompts (default 0)")
    py.add_argument("--threshold", type=finite, default=0.5,
                    help="fraction of prompts greedy-correct that counts as solved (default 0.5)")
    py.add_argument("--top-k", type=int, default=4, help="patch the top 1..K heads together (default 4)")
    py.add_argument("--lexicon", default="modern", choices=sorted(LEXICONS),
                    help="the probe's words: modern (Pythia's: digits, modern names) or shakespeare "
                         "(lm-family's corpus) (default modern)")
    py.add_argument("--curve", action="store_true",
                    help="evaluate the probe at every revision, not only those the bisection needs")
    py.add_argument("--head-scores", action="store_true",
                    help="every head's previous-token and induction scores at every revision")
    py.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto)")
    return p


def main(args: argparse.Namespace, extra: list[str] | None = None) -> int:
    """Run one `analyze` subcommand; bad input raises ValueError (the CLI prints it and exits 2)."""
    if extra:
        raise ValueError(f"unrecognized arguments: {' '.join(extra)}")
    from emergence_bench.results.store import ANALYSIS_DIR

    # What each reads, and where each writes (a run's analysis/ folder, a results folder), checked
    # before anything is computed (or torch imported).
    if args.analysis in ("emergence", "patch"):
        writable(run_in(args.run_dir), f"`analyze {args.analysis}` writes its report into {ANALYSIS_DIR}/ there: "
                                       f"run it on a writable copy of the run's folder")
    if args.analysis == "abruptness" and Path(args.folder).is_dir():
        from emergence_bench.analysis.abruptness_check import CHECK_FILE

        writable_results(Path(args.folder), "analyze abruptness", CHECK_FILE)
    if args.analysis == "calibration" and Path(args.folder).is_dir():
        from emergence_bench.analysis.calibration import TABLE_FILE

        writable_results(Path(args.folder), "analyze calibration", TABLE_FILE)
    if args.analysis == "calibration":
        from emergence_bench.analysis.calibration import TABLE_FILE, calibration, to_markdown
        from emergence_bench.results.store import write_text

        markdown = to_markdown(calibration(args.folder))
        print(markdown, end="")
        write_text(Path(args.folder) / TABLE_FILE, markdown)
        print(f"wrote {Path(args.folder) / TABLE_FILE}", file=sys.stderr)
        return 0
    if args.analysis == "budget":
        from emergence_bench.analysis import budget
        from emergence_bench.results.store import write_text

        if Path(args.folder).is_dir():
            writable_results(Path(args.folder), "analyze budget", budget.TABLE_FILE)
        markdown = budget.to_markdown(budget.budget(args.folder, args.workers))
        print(markdown, end="")
        write_text(Path(args.folder) / budget.TABLE_FILE, markdown)
        print(f"wrote {Path(args.folder) / budget.TABLE_FILE}", file=sys.stderr)
        return 0
    if args.analysis == "ablation":
        from emergence_bench.analysis import ablation
        from emergence_bench.results.atomic import write_files
        from emergence_bench.results.store import json_text

        folder = Path(args.folder)
        if folder.is_dir():
            writable_results(folder, "analyze ablation", f"{ablation.TABLE_FILE} and {ablation.JSON_FILE}")
        table = ablation.ablation(folder, args.control, args.treatment)
        for warning in table["warnings"]:
            print(f"warning: {warning}", file=sys.stderr)
        markdown = ablation.to_markdown(table)
        print(markdown, end="")
        # Both files or neither: the table and its numbers always judge the same rows.
        write_files({folder / ablation.TABLE_FILE: markdown, folder / ablation.JSON_FILE: json_text(table)})
        print(f"wrote {folder / ablation.TABLE_FILE} and {folder / ablation.JSON_FILE}", file=sys.stderr)
        return 0
    if args.analysis == "pythia":  # checked, not made: a model refused before its row leaves no folder behind
        writable(Path(args.out), "choose another --out", "the results folder ")

    if args.analysis == "emergence":
        from emergence_bench.analysis.checkpoint_analysis import EMERGENCE_FILE, emergence

        r = emergence(args.run_dir, args.probe_batches, args.threshold, args.device)
        for step, acc in r["accuracy"]:
            print(f"step {step}: accuracy {acc:.4f}" + ("  solved" if acc >= r["threshold"] else ""))
        if r["censored"]:
            print(f"never solved (accuracy ≥ {r['threshold']}) in {r['checkpoints']} checkpoints "
                  f"(last {r['steps'][-1]}); {r['evaluations']} evaluated")
        else:
            print(f"emergence between step {r['last_unsolved']} and step {r['first_solved']} "
                  f"(accuracy ≥ {r['threshold']}); {r['evaluations']} of {r['checkpoints']} checkpoints evaluated")
        print(f"wrote {Path(args.run_dir) / ANALYSIS_DIR / EMERGENCE_FILE}", file=sys.stderr)
        return 0
    if args.analysis == "patch":
        from emergence_bench.analysis.checkpoint_analysis import patch

        r = patch(args.run_dir, args.old, args.new, args.top_k, args.ground_truth, args.probe_batches, args.device)
        print_patch(r)
        print(f"wrote {r['path']}", file=sys.stderr)
        return 0
    if args.analysis == "abruptness":
        from emergence_bench.analysis.abruptness_check import CHECK_FILE, check_folder, print_checks
        from emergence_bench.results.store import write_json

        if args.surrogates < 0:
            raise ValueError(f"--surrogates must be ≥ 0, got {args.surrogates}")
        checks = check_folder(args.folder, args.surrogates)
        print_checks(checks)
        write_json(Path(args.folder) / CHECK_FILE, checks)
        print(f"wrote {Path(args.folder) / CHECK_FILE}", file=sys.stderr)
        return 0
    if args.analysis == "pythia":
        from emergence_bench.analysis import pythia

        record = pythia.analyze(args.model, args.probe, revisions=args.revisions, out=args.out,
                                prompts=args.prompts, single=args.single, probe_seed=args.probe_seed,
                                threshold=args.threshold, top_k=args.top_k, device=args.device,
                                lexicon=args.lexicon, curve=args.curve, scores=args.head_scores)
        pythia.print_summary(record)
        print(f"wrote {record['path']}", file=sys.stderr)
        return 1 if record["status"] == "failed" else 0
    raise ValueError(f"unknown analysis {args.analysis!r}")


register_command("analyze", add_parser, main)
