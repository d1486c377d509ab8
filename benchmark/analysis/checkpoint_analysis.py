"""When did a run's capability emerge, and which heads carry it: bisection of its checkpoints and
causal head patching between two of them (the command is ``emergence_bench.commands.analyze``).

"Solves" is the run's own emergence criterion: greedy accuracy on the scored tokens of the probe set
(the task's eval batches) ≥ the emergence callback's threshold.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import yaml

from emergence_bench.machine.devices import resolve_device
from emergence_bench.results.store import ANALYSIS_DIR, CONFIG_FILE

if TYPE_CHECKING:
    from emergence_bench.config import RunConfig
    from emergence_bench.engine.model import SequenceModel
    from emergence_bench.tasks.base import SyntheticTask

DEFAULT_THRESHOLD = 0.95  # the emergence callback's default
EMERGENCE_FILE = "emergence.json"  # in the run's ANALYSIS_DIR; patch files are patch_<old>_<new>[_ground_truth].json


# --- loading a run -------------------------------------------------------------------------------
def load_run(run_dir: str | Path) -> tuple[RunConfig, SyntheticTask, dict[int, Path]]:
    """(resolved RunConfig, task, {step: checkpoint path}) of a run directory."""
    from emergence_bench.callbacks.checkpoints import saved_checkpoints
    from emergence_bench.engine.run import plan

    run_dir = Path(run_dir)
    config_path = run_dir / CONFIG_FILE
    if not config_path.is_file():
        raise ValueError(f"{run_dir} is not a run directory (no {CONFIG_FILE})")
    planned = plan(yaml.safe_load(config_path.read_text()))
    checkpoints = saved_checkpoints(run_dir)
    if not checkpoints:
        raise ValueError(f"{run_dir} has no saved checkpoints; run with e.g. "
                         "--checkpoints.every 50 --checkpoints.log_spaced true")
    return planned.config, planned.task, checkpoints


def load_model(config: RunConfig, task: SyntheticTask, path: Path, device: torch.device) -> SequenceModel:
    """The SequenceModel of a checkpoint file, in eval mode on ``device``."""
    from emergence_bench.engine.run import build_model

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
    """Fraction of scored tokens whose greedy prediction is correct (as the run's eval/accuracy):
    ``loss_mask`` [L] the rows scored in every sequence, or [B, L] each sequence's own (the task's
    ``scored_mask(tokens)``); ``model_inputs`` is the task's (default ``tokens[:, :-1]``)."""
    from emergence_bench.engine.training import scored

    correct = total = 0
    if loss_mask.dim() == 2:
        for part, mask in zip(tokens.split(chunk), loss_mask.split(chunk)):
            logits = model(part[:, :-1] if model_inputs is None else model_inputs(part))
            correct += int((logits.argmax(-1) == part[:, 1:])[mask].sum())
            total += int(mask.sum())
        return correct / total
    rows = loss_mask.nonzero().squeeze(1)
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
    from emergence_bench.results.row import emergence_step
    from emergence_bench.results.store import read_result, write_json

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
    mask = (task.scored_mask(tokens) if task.per_sequence_scoring else task.loss_mask).to(dev)
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
    from emergence_bench.analysis.head_patching import patch_models
    from emergence_bench.results.store import write_json

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
        **patch_models(old_model, new_model, tokens, task.scored_mask(tokens) if task.per_sequence_scoring
                       else task.loss_mask, top_k, pattern, task.model_inputs),
    }
    name = f"patch_{old}_{new}" + ("_ground_truth" if ground_truth else "") + ".json"
    write_json(run_dir / ANALYSIS_DIR / name, report)
    report["path"] = str(run_dir / ANALYSIS_DIR / name)
    return report
