"""Emergence on Pythia: bisect a language probe over GPT-NeoX checkpoints, then patch heads between the
bracketing pair (docs/science.md, "Language probes": the paper's first part).

Checkpoints are Hugging Face hub revisions (``EleutherAI/pythia-70m`` at ``revision="step1000"``) or
local folders ``MODEL/step1000/``; models load with ``attn_implementation="eager"``. GPT-NeoX's eager
attention (transformers' ``modeling_gpt_neox.eager_attention_forward``) computes
``probs = softmax(q kᵀ · scaling + mask)`` and returns ``(probs @ v, probs)``; ``eager_attention``
wraps it for the duration of a forward so a layer's probabilities can be recorded and replaced,
exactly as ``MixerContext.patch`` does for the suite's own mixers.

The result is a ``result.json`` row under ``OUT/<run id>/`` that the leaderboard reads like a run's:
task ``language_probe``, mixer ``pythia``, seed from a ``-seedN`` model name (PolyPythias), the
emergence step (censored at the last revision), and a ``patching`` section.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, cast

import torch

from emergence_bench.analysis import head_scores
from emergence_bench.analysis.bisection import bisect_steps
from emergence_bench.analysis.head_patching import rank_heads, replace_heads
from emergence_bench.analysis.language_probes import Prompt, probe_set
from emergence_bench.machine.devices import resolve_device
from emergence_bench.results.store import RESULT_FILE, SCHEMA_VERSION, versions, write_json

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXAttention

# Pythia's published checkpoints: step0, log-spaced 1…512, then every 1000 to 143000.
PYTHIA_STEPS = [0] + [2**i for i in range(10)] + list(range(1000, 143001, 1000))
_STEP = re.compile(r"step(\d+)$")
_SEED = re.compile(r"-seed(\d+)$")


def revision_step(revision: str) -> int:
    """``"step1000"`` (or a folder named so) -> 1000."""
    match = _STEP.search(Path(str(revision)).name)
    if not match:
        raise ValueError(f"revision {revision!r} is not named stepN")
    return int(match.group(1))


# A Hugging Face hub name: a repository, optionally under its owner (``EleutherAI/pythia-70m``).
_HUB_NAME = re.compile(r"[\w.-]+(/[\w.-]+)?")


def check_model(model: str) -> None:
    """``--model``: a local folder, or a hub name that is not a local path. A path that is not a folder
    (absolute, relative with a parent that is here, or a file) is bad input (ValueError), not a hub
    name to try: the hub's answer would name another problem, and the run a failed row."""
    path = Path(model).expanduser()
    if path.is_dir():
        return
    how = "give a folder of step*/ checkpoint folders, or a hub name such as EleutherAI/pythia-70m"
    if path.exists():
        raise ValueError(f"--model {model} is a file, not a model; {how}")
    local = Path(model.split("/")[0]).is_dir() and "/" in model
    if local or not _HUB_NAME.fullmatch(model) or ".." in model or model.startswith("."):
        raise ValueError(f"--model {model}: no such folder; {how}")


def default_revisions(model: str) -> list[str]:
    """A local folder's ``step*`` subfolders, else Pythia's published revisions."""
    root = Path(model)
    if root.is_dir():
        found = sorted((p.name for p in root.iterdir() if p.is_dir() and _STEP.fullmatch(p.name)), key=revision_step)
        if not found:
            raise ValueError(f"{model} has no step* checkpoint folders; give --revisions")
        return found
    return [f"step{s}" for s in PYTHIA_STEPS]


def model_and_seed(model: str) -> tuple[str, int]:
    """``"EleutherAI/pythia-160m-seed3"`` -> ("EleutherAI/pythia-160m", 3); other names have seed 0,
    so the leaderboard groups the seeds of one model into one row."""
    match = _SEED.search(model.rstrip("/"))
    return (model.rstrip("/")[: match.start()], int(match.group(1))) if match else (model.rstrip("/"), 0)


def _local(model: str, revision: str) -> Path | None:
    """The folder of a local checkpoint, None for a hub name."""
    if Path(revision).is_dir():
        return Path(revision)
    if Path(model).is_dir():
        folder = Path(model) / revision
        if not folder.is_dir():
            raise ValueError(f"no checkpoint folder {folder}")
        return folder
    return None


def load_model(model: str, revision: str, device: torch.device) -> PreTrainedModel:
    """A causal LM checkpoint in eval mode with eager attention (so its probabilities exist)."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar per checkpoint load buries the command's own lines
    folder = _local(model, revision)
    source, kwargs = (str(folder), {}) if folder is not None else (model, {"revision": revision})
    lm = AutoModelForCausalLM.from_pretrained(source, attn_implementation="eager", dtype=torch.float32, **kwargs)
    if lm.config.model_type != "gpt_neox":
        raise ValueError(f"{model} is a {lm.config.model_type} model; the attention hook supports gpt_neox (Pythia)")
    cast(torch.nn.Module, lm).to(device)  # (transformers' `to` wrapper hides Module.to's signature from mypy)
    return lm.eval()


def load_tokenizer(model: str, revision: str) -> PreTrainedTokenizerBase:
    """The checkpoint's tokenizer: the revision folder's, else the model folder's, else the hub's
    (from its main branch)."""
    from transformers import AutoTokenizer

    folder = _local(model, revision)
    if folder is not None:
        candidates = [folder] + ([Path(model)] if Path(model).is_dir() else [])
        for path in candidates:
            if (path / "tokenizer_config.json").is_file() or (path / "tokenizer.json").is_file():
                return AutoTokenizer.from_pretrained(str(path))
        raise ValueError(f"no tokenizer in {' or '.join(map(str, candidates))}")
    return AutoTokenizer.from_pretrained(model)  # Pythia's tokenizer is the same at every step


# --- the attention hook -------------------------------------------------------------------------
@contextmanager
def eager_attention(lm: PreTrainedModel, patch: dict[int, Callable] | None = None,
                    capture: dict | None = None) -> Iterator[None]:
    """Within the block, layer ``l``'s attention probabilities [B, H, L, L] go through ``patch[l]`` and
    land in ``capture[l]`` (after patching, as MixerContext records them)."""
    if lm.config._attn_implementation != "eager":
        raise ValueError("head patching needs attn_implementation='eager'")
    module = sys.modules[type(cast(Any, lm.base_model).layers[0].attention).__module__]  # GPT-NeoX's layers
    original = module.eager_attention_forward
    patch = patch or {}

    def forward(attention: GPTNeoXAttention, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        out, probs = original(attention, query, key, value, attention_mask, *args, **kwargs)
        fn = patch.get(attention.layer_idx)
        if fn is not None:
            probs = fn(probs)
            # What eager does after its softmax (dropout is off in eval): [B, H, L, hd] -> [B, L, H, hd].
            out = torch.matmul(probs, value).transpose(1, 2).contiguous()
        if capture is not None:
            capture[attention.layer_idx] = probs.detach()
        return out, probs

    # GPTNeoXAttention looks the function up in its module at every call, so this reaches every layer.
    setattr(module, "eager_attention_forward", forward)
    try:
        yield
    finally:
        setattr(module, "eager_attention_forward", original)


# --- probes on a language model --------------------------------------------------------------------
class EncodedProbe:
    """A probe set tokenised and grouped by prompt length, so each group is one batch without padding
    (padding would shift Pythia's rotary positions)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, prompts: list[Prompt], device: torch.device) -> None:
        groups: dict[int, list[tuple[list[int], int]]] = {}
        for prompt in prompts:
            ids = tokenizer(prompt.text)["input_ids"]
            answer = tokenizer(prompt.answer, add_special_tokens=False)["input_ids"]
            if not ids or not answer:
                raise ValueError(f"prompt {prompt!r} tokenises to nothing")
            groups.setdefault(len(ids), []).append((ids, answer[0]))
        self.groups = [(torch.tensor([ids for ids, _ in g], device=device),
                        torch.tensor([a for _, a in g], device=device)) for _, g in sorted(groups.items())]
        self.size = len(prompts)

    @torch.no_grad()
    def run(self, lm: PreTrainedModel, patches: list[dict] | None = None,
            capture: bool = False) -> tuple[torch.Tensor, torch.Tensor, list]:
        """(p(answer) [N], greedy correct [N], maps: per group {layer: probs}) for the model, with
        ``patches[g]`` applied to group g."""
        p, correct, maps = [], [], []
        for g, (ids, answers) in enumerate(self.groups):
            captured: dict[int, torch.Tensor] | None = {} if capture else None
            with eager_attention(lm, patches[g] if patches else None, captured):
                logits = lm(input_ids=ids).logits[:, -1].float()
            p.append(logits.softmax(-1).gather(-1, answers[:, None]).squeeze(-1))
            correct.append(logits.argmax(-1) == answers)
            maps.append(captured)
        return torch.cat(p), torch.cat(correct), maps


@torch.no_grad()
def score_heads(lm: PreTrainedModel, tokens: torch.Tensor, length: int) -> dict[str, list[list[float]]]:
    """Every head's previous-token and induction scores on ``tokens`` (head_scores.repeated_tokens):
    {"previous_token": [layer][head], "induction": [layer][head]}."""
    captured: dict[int, torch.Tensor] = {}
    with eager_attention(lm, capture=captured):
        lm(input_ids=tokens)
    per_layer = [head_scores.scores(captured[layer].float().cpu(), length) for layer in sorted(captured)]
    return {kind: [[round(float(v), 5) for v in layer[kind]] for layer in per_layer]
            for kind in ("previous_token", "induction")}


def repeat_probe(tokenizer: PreTrainedTokenizerBase, lm_config: Any, device: torch.device) -> tuple[torch.Tensor, int]:
    """The repeated random tokens the head scores read ([16, 2T + 1]) and T (32, or what fits the context)."""
    special = set(tokenizer.all_special_ids)
    vocab = [i for i in range(min(len(tokenizer), lm_config.vocab_size)) if i not in special]
    length = min(32, (lm_config.max_position_embeddings - 1) // 2)
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else 0
    return head_scores.repeated_tokens(vocab, length, 16, bos).to(device), length


def patch_language_models(old: PreTrainedModel, new: PreTrainedModel, probe: EncodedProbe, top_k: int = 4) -> dict:
    """Head patching of ``new``'s attention maps into ``old`` on every prompt of ``probe``."""
    p_old, _, _ = probe.run(old, capture=True)  # the same hooked path as the patched forwards
    p_new, _, new_maps = probe.run(new, capture=True)
    config = old.config
    heads = [(layer, h) for layer in range(config.num_hidden_layers) for h in range(config.num_attention_heads)]

    def measure(chosen: frozenset) -> float:
        if not chosen:
            return float(p_old.mean())
        patches = [replace_heads(maps, chosen) for maps in new_maps]
        return float(probe.run(old, patches)[0].mean())

    report = rank_heads(measure, heads, float(p_old.mean()), float(p_new.mean()), top_k)
    report["source"] = "new"
    return report


# --- the command ---------------------------------------------------------------------------------
def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")[-60:]


def analyze(model: str, probe: str, revisions: list[str] | None = None, out: str | Path = "runs/pythia",
            prompts: int = 64, single: bool = False, probe_seed: int = 0, threshold: float = 0.5,
            top_k: int = 4, device: str = "auto", lexicon: str = "modern", curve: bool = False,
            scores: bool = False) -> dict:
    """Bisect the emergence step of ``probe`` over ``revisions``, patch heads between the bracketing
    pair, and write the result row to ``out/<run id>/result.json``; returns the row (with its path).

    ``curve``: the probe's accuracy at every revision (the history; bisection still reports which it
    needed). ``scores``: every head's previous-token and induction scores at every revision."""
    if not 0 < threshold <= 1:
        raise ValueError(f"--threshold must be in (0, 1], got {threshold}")
    if top_k < 1:
        raise ValueError(f"--top-k must be ≥ 1, got {top_k}")
    check_model(model)
    revisions = list(revisions or default_revisions(model))
    by_step = {revision_step(r): r for r in revisions}
    for revision in revisions:  # a missing local folder fails here, before anything loads
        _local(model, revision)
    prompt_set = probe_set(probe, prompts, probe_seed, single, lexicon)
    last = max(by_step)
    try:  # the first contact with a hub name: one that cannot be reached is named, before any row exists
        tokenizer = load_tokenizer(model, by_step[last])
    except OSError as error:
        raise ValueError(f"--model {model}: its tokenizer cannot be loaded ({str(error).splitlines()[0]}); check "
                         f"the hub name and the network, or give a local folder of step*/ checkpoints") from None
    base, seed = model_and_seed(model)
    config = {
        "seed": seed,
        "task": {"name": "language_probe", "probe": probe, "prompts": len(prompt_set), "single": single,
                 "probe_seed": probe_seed, "threshold": threshold,
                 **({"lexicon": lexicon} if lexicon != "modern" else {})},  # (Pythia's run ids unchanged)
        "mixer": {"name": "pythia", "model": base},
        "trainer": {"max_steps": last},  # the training span the checkpoints cover (the censoring budget)
    }
    # Like a run id: the same model, probe settings and revisions always get the same id.
    digest = hashlib.sha256(json.dumps([config, sorted(by_step)], sort_keys=True).encode()).hexdigest()[:10]
    run_id = f"pythia-{probe}-{_slug(Path(base).name if Path(base).is_dir() else base)}-seed{seed}-{digest}"
    record = {
        "schema_version": SCHEMA_VERSION, "run_id": run_id, "status": "ok", "error": None, "seed": seed,
        "config": config, "model": model, "revisions": [by_step[s] for s in sorted(by_step)],
        "backend": "transformers-eager", "device": None, "versions": {**versions(), "transformers": _version()},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    start = time.perf_counter()
    try:
        dev = resolve_device(device)
        record["device"] = dev.type
        encoded = EncodedProbe(tokenizer, prompt_set, dev)
        accuracy: dict[int, float] = {}
        head_history: list[tuple[int, dict]] = []
        if curve or scores:
            for step in sorted(by_step):
                lm = load_model(model, by_step[step], dev)
                if curve:
                    accuracy[step] = float(encoded.run(lm)[1].float().mean())
                if scores:
                    if not head_history:
                        repeat, length = repeat_probe(tokenizer, lm.config, dev)
                    head_history.append((step, score_heads(lm, repeat, length)))

        def solves(step: int) -> bool:
            if step not in accuracy:
                lm = load_model(model, by_step[step], dev)
                accuracy[step] = float(encoded.run(lm)[1].float().mean())
            return accuracy[step] >= threshold

        found = bisect_steps(by_step, solves)
        record["emergence"] = {"threshold": threshold, "step": found.first_solved,
                               "revision": None if found.first_solved is None else by_step.get(found.first_solved),
                               **found.to_dict(),
                               "history": [[s, accuracy[s]] for s in sorted(accuracy)]}
        record["metrics"] = {"final_eval_accuracy": accuracy.get(last)}
        if head_history:
            record["head_scores"] = {
                "repeat_length": length, "jump_threshold": head_scores.JUMP,
                "history": [[step, grid] for step, grid in head_history],
                **{f"{kind}_jump": head_scores.jump_step([(s, g[kind]) for s, g in head_history])
                   for kind in ("previous_token", "induction")},
            }
        if found.first_solved is not None and found.last_unsolved is not None:
            old = load_model(model, by_step[found.last_unsolved], dev)
            new = load_model(model, by_step[found.first_solved], dev)
            report = patch_language_models(old, new, encoded, top_k)
            best = report["top_k"][-1]
            record["patching"] = {
                "old": found.last_unsolved, "new": found.first_solved,
                "top_heads": [{"layer": r["layer"], "head": r["head"], "delta_p": r["delta_p"]}
                              for r in report["heads"][:top_k]],
                "gap_recovered": best["fraction_recovered"], "gap_recovered_by": best["k"], **report,
            }
        else:
            why = "never solved" if found.censored else "solved by the first revision"
            record["patching"] = {"skipped": f"no bracketing pair: {why}"}
    except ValueError:
        raise
    except Exception as error:
        record.update(status="failed", error=f"{type(error).__name__}: {error}\n{traceback.format_exc()}")
    record["timing"] = {"steps": last, "seconds": round(time.perf_counter() - start, 3)}
    path = Path(out) / run_id / RESULT_FILE
    write_json(path, record)
    return {**record, "path": str(path)}


def _version() -> str | None:
    try:
        import transformers

        return transformers.__version__
    except ImportError:
        return None


def print_summary(record: dict) -> None:
    if record["status"] != "ok":
        print(f"status {record['status']}: {record['error'].splitlines()[0]}")
        return
    e = record["emergence"]
    print(f"{record['model']} · {record['config']['task']['probe']}: accuracy by step "
          + ", ".join(f"{s}: {a:.2f}" for s, a in e["history"]))
    if e["censored"]:
        print(f"never solved (accuracy ≥ {e['threshold']}) by step {record['timing']['steps']}")
    else:
        print(f"emergence between step {e['last_unsolved']} and step {e['first_solved']}; "
              f"{e['evaluations']} of {e['checkpoints']} checkpoints evaluated")
    h = record.get("head_scores")
    if h:
        for kind in ("previous_token", "induction"):
            jump = h[f"{kind}_jump"]
            where = "never" if jump["step"] is None else f"from step {jump['step']} ({len(jump['heads'])} heads)"
            print(f"{kind.replace('_', '-')} heads (score ≥ {h['jump_threshold']}): {where}")
    p = record["patching"]
    if "skipped" in p:
        print(f"patching skipped: {p['skipped']}")
        return
    print(f"patching step {p['new']} into step {p['old']}: p(answer) {p['p_old']:.4f} -> {p['p_new']:.4f}")
    for h in p["top_heads"]:
        print(f"  L{h['layer']}H{h['head']}: delta_p {h['delta_p']:+.4f}")
    for row in p["top_k"]:
        frac = "n/a" if row["fraction_recovered"] is None else f"{row['fraction_recovered']:.3f}"
        print(f"  top {row['k']}: gap recovered {frac}")
