"""`emergence-bench speed`: speed ratios measured side by side in one run on this machine.

Every ratio is of two timings taken in the same process, interleaved: blocks of the reference (the
suite's own training step looped without Lightning: ``perf.loops``) alternate with blocks of what is
compared, R ≥ 5 repeats; each repeat's ratio is
against the reference blocks just before and after it, and a row shows the median of the R ratios
with their spread (min–max). So a load that drifts slowly cancels, and the spread says whether a
difference is above the noise. The header names the machine's load average when it started.

Tables: a suite run's step vs the same step without Lightning ("bare", ``suite_rows``: what Lightning
and the callbacks add, with FLOP/s and compiled vs eager), seed-parallel per step without Lightning
(``seed_step_rows``: K seeds batched vs K single loops), seed-parallel whole runs (``throughput``:
setup and evals included), and each mixer's step vs the Transformer's.

The whole-run table times the `quick` model only (``WHOLE_RUNS``). Whole runs of the paper's model
cost most of the command's time (K = 16 seeds × the steps × R repeats) and measured what two other
rows already measure: its batched step is ``seed_step_rows``' peer-linear-map (the same architecture,
batch and S = 16) and what a whole run adds to the step (setup, evals, Lightning) is the quick
model's whole-run row next to its per-step one.

Over 400 lines, on purpose: the command's tables share one clock (``interleave``), one header and one
JSON; the mixer tables and the ranking-cell clock already live in ``perf.mixers``.
"""

from __future__ import annotations

import copy
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import lightning as L
import torch

from emergence_bench import registry
from emergence_bench.config import RunConfig, resolve
from emergence_bench.engine.module import EmergenceModule
from emergence_bench.engine.training import StepLoop
from emergence_bench.execution.sweep_spec import load_sweep
from emergence_bench.machine.allocator import keep_freed_memory
from emergence_bench.machine.devices import resolve_device
from emergence_bench.perf.forms import LENGTHS as FORM_LENGTHS
from emergence_bench.perf.forms import form_ratios, render_forms
from emergence_bench.perf.loops import single_loop, stacked_loop
from emergence_bench.perf.mixers import (
    RANKING,
    SEEDS,
    builtin_mixers,
    cell_clock,
    render_cells,
    render_steps,
    step_ratios,
)
from emergence_bench.perf.timing import bracketed, interleave, summary
from emergence_bench.results.store import write_json


def _fmt(s: dict, unit: str = "") -> str:
    """``median (min–max)`` of a ``summary``."""
    return f"{s['median']:.2f}{unit} ({s['min']:.2f}–{s['max']:.2f})"


def machine() -> dict:
    """The machine and its load from other processes (os.getloadavg: 1, 5, 15 minutes)."""
    load: list[float | None] = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else [None] * 3
    return {"cores": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "allocator": keep_freed_memory(), "load_1m": load[0], "load_5m": load[1], "load_15m": load[2]}


# ----------------------------------------------------------------------------------------------
# The models and the loops.

# The models the suite-overhead and whole-run rows measure, as runs of presets (preset, group, grid
# values): the `quick` preset's base run and the paper's linear map at S=16, s=8.
SUITE_RUNS = {
    "quick": ("quick", None, {"task.sparsity": 3}),
    "paper-linear-map": ("paper-linear-map", "S16", {"task.sparsity": 8}),
}
# The models of the seed-parallel whole-run table (see the module docstring).
WHOLE_RUNS = ("quick",)
# The per-step seed-parallel settings: `quick` at its batch (128 sequences) and at 16, where one run
# leaves the cores idle, and an independent reproduction's configuration (linear map S=16, s=3,
# d_model 128, MLP 512, 8 heads × 16, batch 256; ~203k parameters).
SEED_RUNS = {
    "quick": ("quick", None, {"task.sparsity": 3}),
    "quick-b16": ("quick", None, {"task.sparsity": 3, "task.batch_size": 16}),
    "peer-linear-map": ("peer-linear-map", "seewhy", {}),
}


def preset_run(preset: str, group: str | None = None, values: dict | None = None) -> dict:
    """The raw config of the first run of ``preset`` (in ``group``, with the grid narrowed to
    ``values``, dotted keys): task, mixer, model, optim, trainer and callbacks as the preset trains it."""
    sweep = load_sweep(preset)
    if group is not None:
        sweep.select([group])
    sweep.override(values or {})
    return sweep.raw_runs()[0][1]


def timed_config(raw: dict, max_steps: int) -> RunConfig:
    """``raw`` (a preset run) resolved for timing on the CPU: ``max_steps`` steps, one eval at the end."""
    raw = copy.deepcopy(raw)
    raw.setdefault("trainer", {}).update(max_steps=max_steps, eval_every=max_steps, accelerator="cpu")
    return resolve(raw)


# ----------------------------------------------------------------------------------------------
# Suite vs bare loop, interleaved inside one suite run.


class ClockSession:
    """What ``SuiteClock`` fills during one measurement: the bare loop it runs between suite blocks
    and both series of seconds per step (bare [R + 1], suite [R])."""

    def __init__(self, bare: StepLoop) -> None:
        self.bare = bare
        self.bare_s: list[float] = []
        self.suite_s: list[float] = []


class SuiteClock(L.Callback):
    """A callback in a suite run that alternates the run with a bare loop in the same process: after
    ``warmup`` steps, a bare block of ``block`` steps, then ``block`` suite steps, a bare block, ...,
    ``repeats`` suite blocks and ``repeats + 1`` bare blocks. A suite block is timed from one
    ``on_train_batch_start`` to the one ``block`` steps later, so it holds ``block`` whole iterations of
    the Trainer's loop (data, step, every callback and logger) and no setup, eval or teardown.
    Registered as the callback ``speed_clock`` by ``suite_vs_bare``, so a run's config names it like
    any other; its own cost is Lightning's dispatch of each hook to one more callback."""

    session: ClockSession | None = None  # set by ``suite_vs_bare`` around the run

    def __init__(self, task: object = None, warmup: int = 5, block: int = 100, repeats: int = 5) -> None:
        self.warmup, self.block, self.repeats = warmup, block, repeats
        self._start: float | None = None

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: torch.Tensor, batch_idx: int) -> None:
        offset, s = trainer.global_step - self.warmup, SuiteClock.session
        if s is None or offset < 0 or offset % self.block or offset // self.block > self.repeats:
            return
        start = time.perf_counter()
        if self._start is not None:
            s.suite_s.append((start - self._start) / self.block)
        s.bare.run(self.block)
        s.bare_s.append((time.perf_counter() - start) / self.block)
        self._start = time.perf_counter() if len(s.suite_s) < self.repeats else None


def suite_vs_bare(raw: dict, steps: int, repeats: int, warmup: int = 5) -> tuple[StepLoop, list, list]:
    """One suite run of ``raw`` (a preset run, on the CPU) with ``SuiteClock`` interleaving it with a
    ``single_loop`` of the same config (the suite's step without Lightning). Returns (the bare loop,
    bare seconds per step [R + 1], suite seconds per step [R])."""
    from emergence_bench.engine.run import run

    if "speed_clock" not in registry.callbacks.names():
        registry.register_callback("speed_clock")(SuiteClock)
    config = timed_config(raw, warmup + repeats * steps + 1)
    bare = single_loop(config)
    bare.run(3)  # warm-up: allocator, first-call costs
    data = config.to_dict()
    data["callbacks"]["speed_clock"] = {"warmup": warmup, "block": steps, "repeats": repeats}
    SuiteClock.session = session = ClockSession(bare)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            record = run(data, scratch)
    finally:
        SuiteClock.session = None
    if len(session.suite_s) != repeats:
        raise RuntimeError(f"the suite run ended ({record['status']}: {record['error']}) after "
                           f"{len(session.suite_s)} of {repeats} timed blocks")
    return bare, session.bare_s, session.suite_s


def matmul_flops_per_second(n: int = 1024, repeats: int = 10) -> float:
    """This machine's dense float32 matmul rate (the best of ``repeats``), the yardstick for FLOP/s."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def step_flops(loop: StepLoop) -> int:
    """FLOPs of one forward + backward of the loop's model (torch's flop counter)."""
    from torch.utils.flop_counter import FlopCounterMode

    module, tokens = loop.module, loop.batches(0).to(loop.device)
    with FlopCounterMode(display=False) as counter:
        scored, full = module.losses(tokens)
        (full if module.train_on == "all" else scored).backward()
    loop.optimizer.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def suite_rows(steps: int = 100, repeats: int = 5, models: dict | None = None, compile_check: bool = True,
               warmup: int = 5) -> list[dict]:
    """Per model (name -> preset run; default: ``SUITE_RUNS``): suite vs bare loop per step, interleaved
    (median of ``repeats`` ratios, each against the bare blocks either side), the data-generation share
    of the bare step, achieved FLOP/s vs matmul peak, and (optionally) a torch.compile'd bare loop vs
    the eager one, interleaved the same way."""
    peak = matmul_flops_per_second()
    rows = []
    for name, raw in (models or {n: preset_run(*SUITE_RUNS[n]) for n in SUITE_RUNS}).items():
        bare, bare_s, suite_s = suite_vs_bare(raw, steps, repeats, warmup)
        ratio = summary(bracketed(bare_s, suite_s))
        suite_step, bare_step = statistics.median(suite_s), statistics.median(bare_s)
        flops = step_flops(bare)
        row = {"model": name, "steps": steps, "repeats": repeats, "suite_ms": suite_step * 1e3,
               "bare_ms": bare_step * 1e3, "suite_vs_bare": ratio,
               "data_share": bare.data_seconds / bare.index / bare_step, "gflops": flops / suite_step / 1e9,
               "matmul_peak_gflops": peak / 1e9,
               "fraction_of_peak": flops / suite_step / peak, "compiled_vs_eager": None, "compile_error": None}
        if compile_check:
            try:
                compiled = single_loop(timed_config(raw, warmup + repeats * steps + 1), compile_model=True)
                compiled.run(3)  # compiles
                eager_s, times = interleave((bare.run, steps), {"compiled": (compiled.run, steps)}, repeats)
                row["compiled_vs_eager"] = summary(bracketed(eager_s, times["compiled"]))
            except Exception as error:  # a compiler toolchain problem is a finding, not a crash
                row["compile_error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
        rows.append(row)
    return rows


def render_suite(rows: list[dict]) -> str:
    lines = ["| model | suite step (ms) | bare loop (ms) | suite / bare, median (min–max) | data share | GFLOP/s | "
             "of matmul peak | compiled / eager, median (min–max) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        compiled = (_fmt(r["compiled_vs_eager"]) if r["compiled_vs_eager"] is not None
                    else f"failed: {r['compile_error']}" if r["compile_error"] else "-")
        lines.append(f"| {r['model']} | {r['suite_ms']:.2f} | {r['bare_ms']:.2f} | {_fmt(r['suite_vs_bare'])} | "
                     f"{r['data_share']:.1%} | {r['gflops']:.1f} | {r['fraction_of_peak']:.1%} "
                     f"(of {r['matmul_peak_gflops']:.0f}) | {compiled} |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# Seed-parallel per step (no Lightning): K seeds batched vs K sequential bare loops.


def seed_step_rows(ks: Sequence[int] = (1, 4, 16), steps: int = 100, repeats: int = 5, settings: dict | None = None,
                   device: str | None = None) -> list[dict]:
    """Per setting (name -> preset run; default ``SEED_RUNS``) and K: K sequential bare loops
    (K × one ``single_loop``'s step: the seeds' steps cost the same) over one batched ``stacked_loop``
    step, interleaved: bare, K=1, K=4, ..., bare, ... (K's order reversed every other repeat), each
    batched block ``max(2, steps // K)`` steps so every block takes about as long; the median of the
    ``repeats`` ratios, each against the bare blocks either side."""
    where = torch.device(device or resolve_device("auto").type)
    rows = []
    for name, raw in (settings or {n: preset_run(*SEED_RUNS[n]) for n in SEED_RUNS}).items():
        config = resolve(raw)
        bare = single_loop(config, device=where)
        loops = {K: stacked_loop(config, K, where) for K in ks}
        for loop in [bare, *loops.values()]:
            loop.run(3)  # warm-up: allocator, vmap's first call
        bare_s, times = interleave((bare.run, steps), {K: (loops[K].run, max(2, steps // K)) for K in ks}, repeats)
        params = sum(p.numel() for p in cast(EmergenceModule, bare.module).model.parameters())  # single_loop's
        for K in ks:
            speedup = [K / ratio for ratio in bracketed(bare_s, times[K])]
            rows.append({"setting": name, "params": params, "batch": config.task.params["batch_size"],
                         "device": where.type, "k": K, "repeats": repeats, "bare_ms": statistics.median(bare_s) * 1e3,
                         "batched_ms": statistics.median(times[K]) * 1e3, "speedup": summary(speedup)})
    return rows


def render_seed_steps(rows: list[dict]) -> str:
    lines = ["| setting | params | batch | device | seeds K | bare step (ms) | batched step (ms) | "
             "K sequential / batched, median (min–max) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['setting']} | {r['params'] / 1e3:.0f}k | {r['batch']} | {r['device']} | {r['k']} | "
                     f"{r['bare_ms']:.2f} | {r['batched_ms']:.2f} | {_fmt(r['speedup'], '×')} |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# Seed-parallel, whole runs (setup and evals included).


def quick_config(steps: int = 100) -> dict:
    """The ``quick`` preset's base run (linear map S=8 s=3, d_model 64, 8 heads × 8, batch 128)
    with ``steps`` training steps and the preset's eval cadence."""
    base = load_sweep("quick").base
    base.setdefault("trainer", {})["max_steps"] = steps
    return base


def throughput(config: dict | RunConfig | None = None, ks: Sequence[int] = (1, 4, 16), steps: int = 100,
               repeats: int = 1, out: str | Path | None = None) -> list[dict]:
    """Seed-parallel vs one seed at a time, whole runs (setup, evals, result files), wall-clock, side
    by side in this process: K seeds of ``config`` (default: the quick preset at ``steps`` steps)
    together with ``run_seed_parallel``, against K runs one after another with ``emergence_bench.engine.run.run``.
    K sequential runs of one config take K times one run (the same steps, setup and evals; only the
    seed differs), so the reference is one run, interleaved: run, K=1, K=4, ..., run, ... for
    ``repeats`` repeats, each try's ratio against the runs either side.

    Returns one row per K: {k, steps, repeats, sequential_s (K × the median run), parallel_s (median),
    speedup (summary of the per-repeat K·run / parallel), seed_steps_per_s_sequential,
    seed_steps_per_s_parallel, mode ("vmap", or the fallback reason when the model cannot be batched)}.
    """
    from emergence_bench.engine.run import run
    from emergence_bench.engine.seed_parallel import run_seed_parallel

    base = resolve(config if config is not None else quick_config(steps)).to_dict()
    steps = base["trainer"]["max_steps"]
    notes = {}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(out) if out is not None else Path(scratch)
        warm = {**base, "trainer": {**base["trainer"], "max_steps": 2}}
        run(warm, root / "warmup")  # first-call costs (allocator, TensorBoard, the vmap rule) off the clock
        run_seed_parallel([warm], root / "warmup")

        def parallel(K: int) -> Callable[[int], None]:
            configs = [{**base, "seed": base["seed"] + i} for i in range(K)]
            return lambda _: notes.update({K: run_seed_parallel(configs, root / f"k{K}")[0]["seed_parallel"]})

        one, times = interleave((lambda _: run(base, root / "sequential"), 1), {K: (parallel(K), 1) for K in ks},
                                repeats)
    rows = []
    for K in ks:
        sequential, par = K * statistics.median(one), statistics.median(times[K])
        rows.append({
            "k": K, "steps": steps, "repeats": repeats, "sequential_s": sequential, "parallel_s": par,
            "speedup": summary([K / ratio for ratio in bracketed(one, times[K])]),
            "seed_steps_per_s_sequential": K * steps / sequential, "seed_steps_per_s_parallel": K * steps / par,
            "mode": "vmap" if "group" in notes[K] else notes[K]["fallback"],
        })
    return rows


def seed_parallel_rows(ks: Sequence[int] = (1, 4, 16), steps: int = 100, repeats: int = 5,
                       models: dict | None = None) -> list[dict]:
    """Per model (name -> preset run; default ``WHOLE_RUNS``), ``throughput`` at ``steps`` steps with
    the preset's eval cadence, each row named by its model."""
    rows = []
    for name, raw in (models or {n: preset_run(*SUITE_RUNS[n]) for n in WHOLE_RUNS}).items():
        config = copy.deepcopy(raw)
        config.setdefault("trainer", {})["max_steps"] = steps
        rows += [{"model": name, **row} for row in throughput(config, ks=ks, repeats=repeats)]
    return rows


def render_seeds(rows: list[dict]) -> str:
    lines = ["| model | seeds K | steps | K sequential = K × one run (s) | seed-parallel (s) | "
             "speed-up, median (min–max) | seed-steps/s sequential → parallel | mode |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.get('model', '-')} | {r['k']} | {r['steps']} | {r['sequential_s']:.1f} | "
                     f"{r['parallel_s']:.1f} | {_fmt(r['speedup'], '×')} | "
                     f"{r['seed_steps_per_s_sequential']:.0f} → {r['seed_steps_per_s_parallel']:.0f} | {r['mode']} |")
    return "\n".join(lines) + "\n"


MIN_REPEATS = 5  # fewer interleaved repeats give no usable spread
LENGTHS = (16, 64, 256)  # the mixer table's sequence lengths (issue: the ranking's and beyond)
MIXER_STEPS = 10  # steps per block of the mixer table (K = 8 seeds at length 256 is slow)
CELL_STEPS = 100  # steps of each ranking cell the cell clock times


def forms_main(out: str | Path, lengths: Sequence[int] | None = None, repeats: int = 5) -> dict:
    """Print the forms table (``perf.forms``) and write it as JSON to ``out``."""
    if repeats < MIN_REPEATS:
        raise ValueError(f"--repeats must be at least {MIN_REPEATS} for a median with a spread, got {repeats}")
    keep_freed_memory()
    start = machine()
    print(f"machine: {start['cores']} cores, torch {start['torch']} with {start['threads']} threads; load average "
          f"at start {start['load_1m']} (1 min); each form's training step ({SEEDS} seeds batched) over ladder v2's, "
          f"{repeats} interleaved repeats\n")
    rows = form_ratios(tuple(lengths or FORM_LENGTHS), repeats)
    print(render_forms(rows), end="")
    report = {"machine": {"start": start, "end": machine()}, "repeats": repeats, "forms": rows}
    write_json(Path(out), report)
    return report


def main(out: str | Path, lengths: Sequence[int] | None = None, repeats: int = 5, quick: bool = False,
         steps: int = 100, seeds: Sequence[int] = (1, 4, 16), mixers: Sequence[str] | None = None, cells: bool = True,
         cell_steps: int = CELL_STEPS) -> dict:
    """Print the speed tables and write them as JSON to ``out``: ``repeats`` interleaved repeats (at
    least ``MIN_REPEATS``) of ``steps``-step blocks per ratio, seed-parallel at K in ``seeds``; the
    mixer tables (``perf.mixers``) for ``mixers`` (default: the built-in ones) at ``lengths``
    (default ``LENGTHS``) and, with ``cells``, one ranking cell per family of ``cell_steps`` steps.
    ``quick``: a smoke run of the same code paths, in seconds: 2 repeats of 2 steps, K in (1, 2), the
    `quick` model (per step: at 16 sequences), length 16 unless ``lengths`` is given, cells of 2 steps."""
    ks: tuple[int, ...]
    if quick:
        repeats, steps, ks, mixer_repeats, warmup, cell_steps = 2, 2, (1, 2), 2, 1, 2
        lengths = lengths or (16,)
        models = {"quick": preset_run(*SUITE_RUNS["quick"])}
        settings = {"quick-b16": preset_run(*SEED_RUNS["quick-b16"])}
    else:
        if repeats < MIN_REPEATS:
            raise ValueError(f"--repeats must be at least {MIN_REPEATS} for a median with a spread, got {repeats} "
                             "(--quick for a smoke run)")
        ks, mixer_repeats, warmup, models, settings = tuple(seeds), repeats, 5, None, None
    lengths = tuple(lengths or LENGTHS)
    names = list(mixers or builtin_mixers())  # (the command checked their names)
    keep_freed_memory()  # as every run does (emergence_bench.engine.run.run), so both loops time with it
    start = machine()
    print(f"machine: {start['cores']} cores, torch {start['torch']} with {start['threads']} threads, "
          f"{start['allocator']}; "
          f"load average at start (other processes' load) {start['load_1m']} (1 min), {start['load_5m']} (5 min), "
          f"{start['load_15m']} (15 min); {repeats} interleaved repeats of {steps}-step blocks per ratio\n")
    suite = suite_rows(steps=steps, repeats=repeats, models=models, compile_check=not quick, warmup=warmup)
    print(render_suite(suite))
    seed_steps = seed_step_rows(ks=ks, steps=steps, repeats=repeats, settings=settings)
    print(render_seed_steps(seed_steps))
    seed_rows = seed_parallel_rows(ks=ks, steps=steps, repeats=repeats, models=models)
    print(render_seeds(seed_rows))
    device = resolve_device("auto").type
    print(f"Each mixer's training step over the Transformer's at the ranking's size ({RANKING}: d_model 32, "
          f"2 layers, {SEEDS} seeds batched), {mixer_repeats} interleaved repeats of {MIXER_STEPS}-step blocks:\n")
    rows = step_ratios(names, lengths, steps=2 if quick else MIXER_STEPS, repeats=mixer_repeats, device=device)
    print(render_steps(rows))
    cell_rows: list[dict] = []
    if cells:
        print(f"One ranking cell per family ({SEEDS} seeds batched on its middle rung at the tuned lr, "
              f"{cell_steps} steps, emergence stop off; setup, evals and rows included), over the Transformer's:\n")
        cell_rows = cell_clock(names, steps=cell_steps, say=lambda line: print(line, file=sys.stderr))
        print(render_cells(cell_rows), end="")
    end = machine()
    print(f"\nload average at end {end['load_1m']} (1 min)")
    report = {"machine": {"start": start, "end": end}, "threads": start["threads"], "torch": torch.__version__,
              "repeats": repeats, "steps": steps, "suite": suite, "seed_parallel_steps": seed_steps,
              "seed_parallel": seed_rows, "mixers": rows, "cells": cell_rows}
    write_json(Path(out), report)
    return report
