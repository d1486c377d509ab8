"""The pilot that tests, on the language family, when induction heads form: Aoyama, Wilcox and
Schneider (arXiv 2511.16893) fit the training tokens at which they form as N = T·√(B·C), T ≈ 10^5.7,
B the batch in sequences and C the context length, whatever the model's size.

A plan (a YAML file: docs/experiments/lm-pilot.yaml) names configurations of the family, each one
seed. Each trains with log-spaced checkpoints for at most 2× the law's N, and every checkpoint's heads
are scored on one repeated random string of fixed length (head_scores.PROBE_LENGTH, the same for
every context); a configuration stops at the first checkpoint where some head's induction score
reaches INDUCTION_FORMED. Configurations train side by side, one thread each.

    OUT/pilot.json            the plan as run, then the summary: per configuration its law's N, the
                              best scores against tokens, formed or not and where
    OUT/pilot.md              the table; OUT/pilot.png the figure (drawn by the command)
    OUT/archives/             the corpora's archives, downloaded once for every configuration
    OUT/<name>/               a family folder (lm_family), one seed; OUT/<name>/lm-seedN/scores.json
                              every head's scores at each checkpoint

Run the same command again to resume: each configuration goes on from its last checkpoint (a
stopped one, formed or at its budget, is left as it is).
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from emergence_bench.analysis.head_scores import PROBE_LENGTH, uniform_scores
from emergence_bench.analysis.lm_family import FamilyConfig, Job, model_folder, prepare, run_jobs, train_seed
from emergence_bench.results.store import write_json, write_text

LAW_T = 10 ** 5.7  # the law's constant, in tokens
STOP_AT = 2.0  # a configuration that forms no induction head stops at this many times the law's N
PILOT_FILE, TABLE_FILE, FIGURE_FILE, SCORES_FILE = "pilot.json", "pilot.md", "pilot.png", "scores.json"
PLAN_KEYS = {"name", "description", "seed", "base", "arms"}

INDUCTION_FORMED = 0.3
"""An induction head has formed once some head's induction score on the fixed probe reaches this.

Chosen before any pilot ran, from what was known then. It is the suite's JUMP, the score from which a
head "has" a pattern, under which the family's previous-token heads were read (they rose from 0.06 to
0.5). Uniform attention scores 0.043 on the fixed probe (T = 15; head_scores.uniform_scores). Every
checkpoint of the family and of its earlier pilots kept its best induction head at 0.015-0.034 on
the T = 32 probe, at most 1.6× uniform attention there (0.021): about 0.07 at T = 15. A formed
induction head puts most of its mass on the token to copy (Olsson et al.: near 1). So 0.3 is 7× the
diffuse level, over 4× the best seen, and well below what a formed head scores. It is the stop
rule's threshold, and is not to be tuned on the pilot's curves."""


def predicted_tokens(batch: int, context: int) -> float:
    """The law's N: the training tokens at which an induction head forms, T·√(B·C)."""
    if batch < 1 or context < 1:
        raise ValueError(f"the law needs a batch and a context ≥ 1, got {batch}, {context}")
    return LAW_T * math.sqrt(batch * context)


def budget_steps(config: FamilyConfig) -> int:
    """The steps that train STOP_AT × the law's N tokens (rounded up)."""
    tokens_per_step = config.batch_size * config.context
    return math.ceil(STOP_AT * predicted_tokens(config.batch_size, config.context) / tokens_per_step)


def stop_reason(best_induction: float, tokens: int, predicted: float) -> str | None:
    """Why a configuration stops at a checkpoint: "formed" (some head's induction score reached
    INDUCTION_FORMED), "budget" (STOP_AT × the law's N tokens trained), or None (it goes on)."""
    if best_induction >= INDUCTION_FORMED:
        return "formed"
    if tokens >= STOP_AT * predicted:
        return "budget"
    return None


# --- the plan -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Arm:
    """One configuration of the pilot: its name (its folder), the family's settings and the seed."""

    name: str
    config: FamilyConfig
    seed: int

    @property
    def predicted(self) -> float:
        return predicted_tokens(self.config.batch_size, self.config.context)

    @property
    def tokens_per_step(self) -> int:
        return self.config.batch_size * self.config.context


def read_plan(path: Path, max_steps: int | None = None) -> tuple[dict, list[Arm]]:
    """The plan in ``path`` and its configurations, each's max_steps set by the law (STOP_AT × N), or
    capped at ``max_steps`` (a smoke of the machinery: the table says so)."""
    import yaml

    if not path.is_file():
        raise ValueError(f"--plan {path}: no such file")
    try:
        plan = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ValueError(f"--plan {path} is not YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(plan, dict) or not isinstance(plan.get("arms"), dict) or not plan["arms"]:
        raise ValueError(f"--plan {path} must be a mapping with arms: {{name: {{family keys}}}}")
    unknown = sorted(set(plan) - PLAN_KEYS)
    if unknown:
        raise ValueError(f"--plan {path}: unknown keys {unknown}; known: {sorted(PLAN_KEYS)}")
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"--max-steps must be ≥ 1, got {max_steps}")
    if not isinstance(plan.get("base") or {}, dict):
        raise ValueError(f"--plan {path}: base must be a mapping of family keys")
    seed = plan.get("seed", 100)
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"--plan {path}: seed must be a non-negative integer, got {seed!r}")
    arms = []
    for name, keys in plan["arms"].items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
            raise ValueError(f"--plan {path}: arm name {name!r} must be letters, digits, '.', '_' or '-' (a folder)")
        if not isinstance(keys or {}, dict):
            raise ValueError(f"--plan {path}: arm {name} must be a mapping of family keys, got {keys!r}")
        merged = {**(plan.get("base") or {}), **(keys or {})}
        if "max_steps" in merged:
            raise ValueError(f"--plan {path}: arm {name} sets max_steps; the law sets it ({STOP_AT:g}× its "
                             f"prediction); --max-steps caps it for a smoke")
        try:
            config = FamilyConfig.from_dict(merged)
        except (TypeError, ValueError) as error:
            raise ValueError(f"--plan {path}: arm {name}: {error}") from None
        if config.context < 2 * PROBE_LENGTH + 1:
            raise ValueError(f"--plan {path}: arm {name} has context {config.context}; the fixed probe needs "
                             f"{2 * PROBE_LENGTH + 1}")
        steps = budget_steps(config)
        arms.append(Arm(name, replace(config, max_steps=min(steps, max_steps or steps)), seed))
    return plan, arms


# --- scoring at each checkpoint -----------------------------------------------------------------
@functools.cache
def fixed_probe(tokenizer_folder: Path) -> Any:
    """The probe every checkpoint is scored on: 16 repeats of PROBE_LENGTH random non-special tokens
    (head_scores.repeated_tokens, [16, 2·PROBE_LENGTH + 1])."""
    from transformers import PreTrainedTokenizerFast

    from emergence_bench.analysis.head_scores import repeated_tokens

    tokenizer = PreTrainedTokenizerFast.from_pretrained(tokenizer_folder)
    special = set(tokenizer.all_special_ids)
    vocab = [i for i in range(len(tokenizer)) if i not in special]
    return repeated_tokens(vocab, PROBE_LENGTH, 16, tokenizer.bos_token_id or 0)


def best(grid: list[list[float]]) -> float:
    """The best head's score in a [layer][head] grid."""
    return max(max(layer) for layer in grid)


@dataclass(frozen=True)
class ScoreCheckpoints:
    """At each checkpoint of one configuration's seed: every head's scores on the fixed probe, kept in
    the seed's scores.json (a checkpoint seen again after a resume is read back, not scored again),
    and whether the stop rule ends the training there."""

    folder: Path  # the seed's folder (its checkpoints, its tokenizer)
    tokens_per_step: int
    predicted: float  # the law's N

    def __call__(self, step: int, checkpoint: Path) -> bool:
        import torch

        from emergence_bench.analysis.pythia import load_model, score_heads

        path = self.folder / SCORES_FILE
        record = json.loads(path.read_text()) if path.is_file() else {
            "probe_length": PROBE_LENGTH, "threshold": INDUCTION_FORMED, "checkpoints": {}}
        if str(step) not in record["checkpoints"]:
            lm = load_model(str(self.folder), str(checkpoint), torch.device("cpu"))
            record["checkpoints"][str(step)] = {"tokens": step * self.tokens_per_step,
                                                **score_heads(lm, fixed_probe(self.folder), PROBE_LENGTH)}
            write_json(path, record)
        scored = record["checkpoints"][str(step)]
        return stop_reason(best(scored["induction"]), scored["tokens"], self.predicted) is not None


def arm_job(out: Path, arm: Arm) -> Job:
    folder = out / arm.name
    hook = ScoreCheckpoints(model_folder(folder, arm.seed), arm.tokens_per_step, arm.predicted)
    return Job(folder, arm.config, arm.seed, hook)


def train_arm(out: Path, arm: Arm, threads: int = 1) -> dict:
    """One configuration trained here, in this process (the workers' run_jobs does the same)."""
    job = arm_job(out, arm)
    return train_seed(job.out, job.config, job.seed, threads, job.on_checkpoint)


# --- the pilot ----------------------------------------------------------------------------------
def run_pilot(out: Path, plan: dict, arms: list[Arm], workers: int = 2) -> dict:
    """Prepare every configuration's corpus, train those not finished (``workers`` at a time, one
    thread each), then summarise; writes OUT/pilot.json and OUT/pilot.md and returns the summary."""
    if workers < 1:
        raise ValueError(f"--workers must be ≥ 1, got {workers}")
    out.mkdir(parents=True, exist_ok=True)
    for arm in arms:
        facts = prepare(out / arm.name, arm.config, cache=out / "archives")
        print(f"{arm.name}: law's N {arm.predicted / 1e6:.1f}M tokens; {arm.config.max_steps} steps "
              f"({arm.config.max_steps * arm.tokens_per_step / 1e6:.1f}M tokens, "
              f"{arm.config.max_steps * arm.tokens_per_step / facts['train_tokens']:.1f} passes)", flush=True)
    run_jobs([arm_job(out, arm) for arm in arms if not finished(out, arm)], workers, threads=1)
    return write_summary(out, plan, arms)


def finished(out: Path, arm: Arm) -> bool:
    """Whether the configuration's seed ended (formed, or at its budget): no worker is started for it."""
    path = model_folder(out / arm.name, arm.seed) / "train.json"
    return path.is_file() and json.loads(path.read_text()).get("status") == "ok"


def arm_summary(out: Path, arm: Arm) -> dict:
    """One configuration's row: its settings, the law's N, the best scores against tokens, and whether
    and where an induction head formed."""
    folder = model_folder(out / arm.name, arm.seed)
    scores = json.loads((folder / SCORES_FILE).read_text()) if (folder / SCORES_FILE).is_file() else {}
    train = json.loads((folder / "train.json").read_text()) if (folder / "train.json").is_file() else {}
    facts_path = out / arm.name / "corpus" / "corpus.json"
    train_tokens = json.loads(facts_path.read_text())["train_tokens"] if facts_path.is_file() else None
    checkpoints = sorted(((int(s), c) for s, c in scores.get("checkpoints", {}).items()))
    curve = [[c["tokens"], best(c["induction"]), best(c["previous_token"])] for _, c in checkpoints]
    formed = next((i for i, point in enumerate(curve) if point[1] >= INDUCTION_FORMED), None)
    top = max(range(len(curve)), key=lambda i: curve[i][1]) if curve else None
    status = train.get("status", "not started")
    if status == "ok":
        status = "formed" if formed is not None else "not formed"
    trained = curve[-1][0] if curve else 0
    return {
        "name": arm.name, "seed": arm.seed, "config": asdict(arm.config), "head_dim": arm.config.head_dim,
        "predicted_tokens": arm.predicted, "budget_tokens": arm.config.max_steps * arm.tokens_per_step,
        "capped": arm.config.max_steps * arm.tokens_per_step < STOP_AT * arm.predicted,
        "status": status, "error": train.get("error"), "trained_tokens": trained,
        "passes": trained / train_tokens if train_tokens else None, "minutes": train.get("seconds", 0) / 60,
        "curve": curve,
        "best_induction": None if top is None else curve[top][1],
        "best_induction_tokens": None if top is None else curve[top][0],
        "best_previous_token": max((p[2] for p in curve), default=None),
        "formed_tokens": None if formed is None else curve[formed][0],
        "formed_after": None if not formed else curve[formed - 1][0],  # the checkpoint before: the bracket
    }


def write_summary(out: Path, plan: dict, arms: list[Arm]) -> dict:
    summary = {"plan": plan, "law": {"T": LAW_T, "stop_at": STOP_AT}, "threshold": INDUCTION_FORMED,
               "probe_length": PROBE_LENGTH, "uniform": uniform_scores(PROBE_LENGTH),
               "arms": [arm_summary(out, arm) for arm in arms]}
    write_json(out / PILOT_FILE, summary)
    write_text(out / TABLE_FILE, table(summary))
    return summary


def _m(tokens: float | None) -> str:
    return "—" if tokens is None else f"{tokens / 1e6:.2f}"


def table(summary: dict) -> str:
    """The pilot's table in Markdown: a row per configuration."""
    lines = [f"Induction head formed: some head's score ≥ {summary['threshold']} on the fixed probe "
             f"(T = {summary['probe_length']}; uniform attention scores {summary['uniform']['induction']:.3f}). "
             f"Law: N = 10^5.7·√(B·C); each configuration stops at {summary['law']['stop_at']:g}× N. Tokens in M.",
             "",
             "| configuration | C | B | heads × dim | schedule | corpus | law's N | trained (passes) | best induction "
             "(at) | best prev-token | formed at | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for a in summary["arms"]:
        c = a["config"]
        schedule = "constant" if c["schedule"] == "constant" else f"cosine → {c['lr_floor']:g}"
        passes = "" if a["passes"] is None else f" ({a['passes']:.1f})"
        best_at = ("—" if a["best_induction"] is None
                   else f"{a['best_induction']:.3f} ({_m(a['best_induction_tokens'])})")
        prev = "—" if a["best_previous_token"] is None else f"{a['best_previous_token']:.3f}"
        formed = "—" if a["formed_tokens"] is None else f"{_m(a['formed_after'])}–{_m(a['formed_tokens'])}"
        status = a["status"] + (" (budget capped)" if a["capped"] else "")
        lines.append(f"| {a['name']} | {c['context']} | {c['batch_size']} | {c['heads']} × {a['head_dim']} | "
                     f"{schedule} | {c['corpus']} | {_m(a['predicted_tokens'])} | {_m(a['trained_tokens'])}{passes} | "
                     f"{best_at} | {prev} | {formed} | {status} |")
    return "\n".join(lines) + "\n"
