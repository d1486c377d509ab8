"""`emergence-bench analyze`: when did a capability emerge, and which heads carry it?

    analyze emergence RUN_DIR [--probe-batches N]     bisect the saved checkpoints for the first that
                                                      solves the task -> RUN_DIR/analysis/emergence.json
    analyze patch RUN_DIR --old STEP --new STEP       causal head patching between two checkpoints
          [--top-k K] [--ground-truth]                -> RUN_DIR/analysis/patch_<old>_<new>[_ground_truth].json
    analyze pythia --model NAME_OR_PATH --probe NAME  the same on Pythia checkpoints with a language probe
          [--revisions step0 step1000 ...] [--out DIR] -> DIR/<run id>/result.json (a leaderboard row)

The same commands also run as `python -m emergence_bench.analysis.analyze emergence RUN_DIR ...`.
"Solves" is the run's own emergence criterion: greedy accuracy on the scored tokens of the probe set
(the task's eval batches) ≥ the emergence callback's threshold.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import yaml

from emergence_bench.machine.devices import resolve_device
from emergence_bench.results import ANALYSIS_DIR, CONFIG_FILE

if TYPE_CHECKING:
    from emergence_bench.config import RunConfig
    from emergence_bench.model import SequenceModel
    from emergence_bench.tasks.base import SyntheticTask

DEFAULT_THRESHOLD = 0.95  # the emergence callback's default
EMERGENCE_FILE = "emergence.json"  # in the run's ANALYSIS_DIR; patch files are patch_<old>_<new>[_ground_truth].json


# --- loading a run -------------------------------------------------------------------------------
def load_run(run_dir: str | Path) -> tuple[RunConfig, SyntheticTask, dict[int, Path]]:
    """(resolved RunConfig, task, {step: checkpoint path}) of a run directory."""
    from emergence_bench.run import build_task, check
    from emergence_bench.callbacks.checkpoints import saved_checkpoints

    run_dir = Path(run_dir)
    config_path = run_dir / CONFIG_FILE
    if not config_path.is_file():
        raise ValueError(f"{run_dir} is not a run directory (no {CONFIG_FILE})")
    config = check(yaml.safe_load(config_path.read_text()))
    checkpoints = saved_checkpoints(run_dir)
    if not checkpoints:
        raise ValueError(f"{run_dir} has no saved checkpoints; run with e.g. "
                         "--checkpoints.every 50 --checkpoints.log_spaced true")
    return config, build_task(config), checkpoints


def load_model(config: RunConfig, task: SyntheticTask, path: Path, device: torch.device) -> SequenceModel:
    """The SequenceModel of a checkpoint file, in eval mode on ``device``."""
    from emergence_bench.run import build_model

    model = build_model(config, task)
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True)["model"])
    return model.to(device).eval()


def probe_tokens(task: SyntheticTask, batches: int) -> torch.Tensor:
    """The first ``batches`` eval batches [batches · B, L+1]: the same sequences the run was scored on."""
    if batches < 1:
        raise ValueError(f"--probe-batches must be ≥ 1, got {batches}")
    return torch.cat([task.batch("eval", i) for i in range(batches)])


def _checkpoint(checkpoints: dict, step: int) -> Path:
    if step not in checkpoints:
        raise ValueError(f"no checkpoint at step {step}; saved steps: {', '.join(map(str, checkpoints))}")
    return checkpoints[step]


@torch.no_grad()
def greedy_accuracy(model: SequenceModel, tokens: torch.Tensor, loss_mask: torch.Tensor, chunk: int = 512,
                    model_inputs: Callable[[torch.Tensor], torch.Tensor] | None = None) -> float:
    """Fraction of scored tokens whose greedy prediction is correct (as the run's eval/accuracy);
    ``model_inputs`` is the task's (default ``tokens[:, :-1]``)."""
    from emergence_bench.training import scored

    rows = loss_mask.nonzero().squeeze(1)
    correct = total = 0
    for part in tokens.split(chunk):
        logits, targets = scored(model(part[:, :-1] if model_inputs is None else model_inputs(part)), part[:, 1:], rows)
        correct += int((logits.argmax(-1) == targets).sum())
        total += targets.numel()
    return correct / total


# --- analyze emergence -------------------------------------------------------------------------
def emergence(run_dir: str | Path, probe_batches: int | None = None, threshold: float | None = None,
              device: str = "auto") -> dict:
    """Bisect the run's checkpoints for the earliest that solves the task; writes analysis/emergence.json."""
    from emergence_bench.analysis.bisection import bisect_steps
    from emergence_bench.result_row import emergence_step
    from emergence_bench.results import read_result, write_json

    run_dir = Path(run_dir)
    config, task, checkpoints = load_run(run_dir)
    dev = resolve_device(device)
    if threshold is None:
        from emergence_bench.callbacks.emergence import effective_threshold

        emergence = config.callback("emergence")
        settings = emergence.params if emergence else {}
        threshold = effective_threshold(settings.get("threshold", DEFAULT_THRESHOLD),
                                        settings.get("relative", True), task)
    batches = config.trainer.eval_batches if probe_batches is None else probe_batches
    tokens = probe_tokens(task, batches).to(dev)
    mask = task.loss_mask.to(dev)
    accuracy: dict[int, float] = {}

    def solves(step: int) -> bool:
        accuracy[step] = greedy_accuracy(load_model(config, task, checkpoints[step], dev), tokens, mask,
                                         model_inputs=task.model_inputs)
        return accuracy[step] >= threshold

    found = bisect_steps(checkpoints, solves)
    result = read_result(run_dir)
    report = {
        "analysis": "emergence",
        "run_id": config.run_id(),
        "threshold": threshold,
        "probe_batches": batches,
        "probe_sequences": int(tokens.shape[0]),
        "emergence_step": found.first_solved,
        **found.to_dict(),
        "accuracy": [[step, accuracy[step]] for step, _ in found.evaluated],
        "steps": list(checkpoints),
        "eval_emergence_step": emergence_step(result) if result else None,
    }
    write_json(run_dir / ANALYSIS_DIR / EMERGENCE_FILE, report)
    return report


# --- analyze patch -------------------------------------------------------------------------------
def patch(run_dir: str | Path, old: int, new: int, top_k: int = 4, ground_truth: bool = False,
          probe_batches: int = 1, device: str = "auto") -> dict:
    """Causal head patching from checkpoint ``new`` into ``old`` (or the task's ground truth);
    writes analysis/patch_<old>_<new>[_ground_truth].json."""
    from emergence_bench.analysis.patching import patch_models
    from emergence_bench.results import write_json

    if top_k < 1:
        raise ValueError(f"--top-k must be ≥ 1, got {top_k}")
    run_dir = Path(run_dir)
    config, task, checkpoints = load_run(run_dir)
    dev = resolve_device(device)
    old_model = load_model(config, task, _checkpoint(checkpoints, old), dev)
    new_model = load_model(config, task, _checkpoint(checkpoints, new), dev)
    tokens = probe_tokens(task, probe_batches).to(dev)
    pattern = task.ground_truth_attention() if ground_truth else None
    report = {
        "analysis": "patch",
        "run_id": config.run_id(),
        "old": old,
        "new": new,
        "probe_batches": probe_batches,
        "probe_sequences": int(tokens.shape[0]),
        "top_k_requested": top_k,
        **patch_models(old_model, new_model, tokens, task.loss_mask, top_k, pattern, task.model_inputs),
    }
    name = f"patch_{old}_{new}" + ("_ground_truth" if ground_truth else "") + ".json"
    write_json(run_dir / ANALYSIS_DIR / name, report)
    report["path"] = str(run_dir / ANALYSIS_DIR / name)
    return report


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
        print(f"top {row['k']} ({heads}): delta_p {row['delta_p']:+.4f}, gap recovered {_fraction(row['fraction_recovered'])}")
    a = report["all_heads"]
    print(f"all {a['k']} heads: delta_p {a['delta_p']:+.4f}, gap recovered {_fraction(a['fraction_recovered'])}")


# --- command line -------------------------------------------------------------------------------
def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
               ) -> argparse.ArgumentParser:
    """Add the `analyze` command (and its subcommands) to a CLI's subparsers."""
    from emergence_bench.analysis.language_probes import PROBES

    p = subparsers.add_parser("analyze", help="emergence bisection and causal head patching (runs and Pythia)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="analysis", required=True)

    e = sub.add_parser("emergence", help="bisect a run's checkpoints for the first that solves the task")
    e.add_argument("run_dir")
    e.add_argument("--probe-batches", type=int, help="eval batches in the probe set (default: the run's eval_batches)")
    e.add_argument("--threshold", type=float, help="accuracy that counts as solved (default: the run's emergence threshold)")
    e.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto)")

    pa = sub.add_parser("patch", help="patch heads' attention maps from a later checkpoint into an earlier one")
    pa.add_argument("run_dir")
    pa.add_argument("--old", type=int, required=True, help="pre-emergence checkpoint step")
    pa.add_argument("--new", type=int, required=True, help="post-emergence checkpoint step")
    pa.add_argument("--top-k", type=int, default=4, help="patch the top 1..K heads together (default 4)")
    pa.add_argument("--ground-truth", action="store_true",
                    help="patch in the task's ground-truth pattern (row-normalised) instead of the new model's maps")
    pa.add_argument("--probe-batches", type=int, default=1, help="eval batches in the probe batch (default 1)")
    pa.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto)")

    py = sub.add_parser("pythia", help="bisect and patch Pythia (GPT-NeoX) checkpoints on a language probe")
    py.add_argument("--model", required=True, help="hub name (EleutherAI/pythia-70m) or local folder of step*/ revisions")
    py.add_argument("--probe", required=True, choices=sorted(PROBES), help="the probe set")
    py.add_argument("--revisions", nargs="+",
                    help="checkpoints to search, e.g. step0 step1000 (default: the local folder's step*/ or "
                         "Pythia's 154 published steps)")
    py.add_argument("--out", default="runs/pythia", help="results directory (default runs/pythia)")
    py.add_argument("--prompts", type=int, default=64, help="prompts in the probe set (default 64)")
    py.add_argument("--single", action="store_true", help="the paper's single-prompt mode")
    py.add_argument("--probe-seed", type=int, default=0, help="seed of the templated prompts (default 0)")
    py.add_argument("--threshold", type=float, default=0.5,
                    help="fraction of prompts greedy-correct that counts as solved (default 0.5)")
    py.add_argument("--top-k", type=int, default=4, help="patch the top 1..K heads together (default 4)")
    py.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto)")
    return p


def main(args: argparse.Namespace, extra: list[str] | None = None) -> int:
    """Run one `analyze` subcommand; bad input raises ValueError (the CLI prints it and exits 2)."""
    if extra:
        raise ValueError(f"unrecognized arguments: {' '.join(extra)}")
    if args.analysis == "emergence":
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
        r = patch(args.run_dir, args.old, args.new, args.top_k, args.ground_truth, args.probe_batches, args.device)
        print_patch(r)
        print(f"wrote {r['path']}", file=sys.stderr)
        return 0
    if args.analysis == "pythia":
        from emergence_bench.analysis import pythia

        record = pythia.analyze(args.model, args.probe, revisions=args.revisions, out=args.out,
                                prompts=args.prompts, single=args.single, probe_seed=args.probe_seed,
                                threshold=args.threshold, top_k=args.top_k, device=args.device)
        pythia.print_summary(record)
        print(f"wrote {record['path']}", file=sys.stderr)
        return 1 if record["status"] == "failed" else 0
    raise ValueError(f"unknown analysis {args.analysis!r}")


def _standalone(argv: list[str] | None = None) -> int:
    """`python -m emergence_bench.analysis.analyze emergence RUN_DIR ...` (the same as `emergence-bench analyze ...`)."""
    parser = argparse.ArgumentParser(prog="python -m emergence_bench.analysis.analyze")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args, extra = parser.parse_known_args(["analyze", *(sys.argv[1:] if argv is None else argv)])
    try:
        return main(args, extra)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_standalone())
