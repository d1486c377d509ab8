"""Each mixer's cost against the Transformer's, at the ranking's own size (`speed`'s mixer tables).

Two clocks, both over the Transformer, which reads 1 by construction (it is the reference the
other rows are timed against, not a second measurement of itself):

- ``step_ratios``: one training step of the ranking's model (``RANKING``'s d_model 32, 2 layers,
  its mixer specs), K = 8 seeds batched as the ranking trains them, per sequence length, on
  ``LENGTH_GROUP``'s task with its rung key set to the length. Interleaved blocks (``interleave``):
  the ratio's median over R repeats, with its spread.
- ``cell_clock``: one ranking cell end to end (``run_seed_parallel`` of 8 seeds on the family's
  middle rung at the mixer's tuned lr: task and oracle setup, evals, Lightning, result rows), with
  the budget cut to ``steps`` and the emergence stop off, so every mixer trains the same steps.
  One timing per cell (a cell is long: the spread is the step table's).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from emergence_bench import registry
from emergence_bench.config import resolve
from emergence_bench.execution.sweep_spec import Sweep, load_sweep
from emergence_bench.mixers.backend import ENV
from emergence_bench.mixers.base import width_matched_spec
from emergence_bench.perf.loops import single_loop, stacked_loop, step_seconds
from emergence_bench.perf.timing import bracketed, interleave, summary

RANKING = "standard-cpu"
LENGTH_GROUP = "dyck"  # a task whose sequence length is a key (task.length)
BASELINE = "transformer"
SEEDS = 8  # the ranking's seed_parallel


@contextmanager
def backend(name: str | None) -> Iterator[None]:
    previous = os.environ.get(ENV)
    if name is not None:
        os.environ[ENV] = name
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = previous


def builtin_mixers() -> list[str]:
    """The registered mixers that ship with the suite (defined in ``emergence_bench.mixers``), not
    plugins or mixers registered elsewhere (e.g. by tests): the speed table compares the suite's own."""
    package = f"{registry.mixers.builtins}."
    return [name for name in registry.mixers.names() if registry.mixers.get(name).__module__.startswith(package)]


def ranking_sweep(mixers: Sequence[str], group: str) -> Sweep:
    """``RANKING`` narrowed to ``group`` and ``mixers`` (built-in ones with their ranking specs, a
    plugin with its defaults); a mixer without a tuned value trains at the base lr (timing only)."""
    sweep = load_sweep(RANKING)
    sweep.select([group])
    sweep.choose_mixers(list(mixers))
    if any(m not in (sweep.tuned or {}) for m in mixers):
        sweep.override({"optim.lr": sweep.base.get("optim", {}).get("lr", 1e-3)})  # no tuning for a clock
    return sweep


def length_config(mixer: str, length: int, seed: int = 0) -> dict:
    """The ranking's run of ``mixer`` at sequence length ``length`` (raw config)."""
    sweep = ranking_sweep([mixer], LENGTH_GROUP)
    sweep.override({"task.length": length, "seed": seed})
    return sweep.raw_runs()[0][1]  # the group's first rung


def _block(mixer: str, length: int, seeds: int) -> Callable[[int], None]:
    """``run(steps)`` trains ``seeds`` seeds of the mixer's ranking run: batched as the ranking does,
    or, where the mixer cannot be batched here, one seed after another (what the ranking then does)."""
    from emergence_bench.engine.batching_probe import seed_parallel_supported
    from emergence_bench.engine.run import plan

    config = resolve(length_config(mixer, length))
    supported, _ = seed_parallel_supported(plan(config))
    if supported:
        loop = stacked_loop(config, seeds)
        loop.run(2)  # warm-up: the allocator's first blocks
        return loop.run
    loops = [single_loop(resolve(length_config(mixer, length, seed))) for seed in range(seeds)]
    for one in loops:
        one.run(2)

    def one_by_one(steps: int) -> None:
        for one in loops:
            one.run(steps)

    return one_by_one


def step_ratios(mixers: Sequence[str], lengths: Sequence[int], seeds: int = SEEDS, steps: int = 10,
                repeats: int = 5, device: str = "cpu") -> list[dict]:
    """Per length: each mixer's training step (``seeds`` seeds) over the Transformer's, interleaved.
    Rows {mixer, length, seeds, step_ms, vs_transformer (a ``summary``; the Transformer's is 1),
    kernel_vs_reference (CUDA only: a 1-layer step, kernel over reference)}."""
    rows = []
    for length in lengths:
        reference = _block(BASELINE, length, seeds)
        others = {name: (_block(name, length, seeds), steps) for name in mixers if name != BASELINE}
        ref, times = interleave((reference, steps), others, repeats)
        base_ms = summary(ref)["median"] * 1e3
        for name in sorted(mixers, key=lambda n: n != BASELINE):  # the reference row first
            if name == BASELINE:
                row = {"mixer": name, "length": length, "seeds": seeds, "step_ms": base_ms,
                       "vs_transformer": summary([1.0] * repeats)}
            else:
                row = {"mixer": name, "length": length, "seeds": seeds,
                       "step_ms": summary(times[name])["median"] * 1e3,
                       "vs_transformer": summary(bracketed(ref, times[name]))}
            row["kernel_vs_reference"] = kernel_ratio(name, length, device)
            rows.append(row)
    return rows


def kernel_ratio(name: str, length: int, device: str, batch: int = 8, d_model: int = 64,
                 repeats: int = 5) -> float | None:
    """On CUDA, a kernel-backed mixer's 1-layer training step with its kernel over its reference."""
    if device != "cuda" or "kernel" not in getattr(registry.mixers.get(name), "backends", ()):
        return None
    spec = width_matched_spec(name)
    with backend("reference"):
        reference = step_seconds(spec, length, batch, d_model, device, repeats)
    with backend("kernel"):
        return step_seconds(spec, length, batch, d_model, device, repeats) / reference


def render_steps(rows: list[dict]) -> str:
    lines = ["| mixer | length | seeds | step (ms) | × transformer | kernel / reference |", "|---|---|---|---|---|---|"]
    for r in rows:
        s = r["vs_transformer"]
        ratio = "1 (reference)" if r["mixer"] == BASELINE else f"{s['median']:.2f} ({s['min']:.2f}–{s['max']:.2f})"
        kernel = "-" if r["kernel_vs_reference"] is None else f"{r['kernel_vs_reference']:.2f}"
        lines.append(f"| {r['mixer']} | {r['length']} | {r['seeds']} | {r['step_ms']:.1f} | {ratio} | {kernel} |")
    return "\n".join(lines) + "\n"


def cell_configs(mixer: str, group: str, steps: int, seeds: int = SEEDS) -> list[dict]:
    """The ranking cell of ``mixer`` on ``group``'s middle rung: ``seeds`` seeds, ``steps`` steps,
    the emergence stop off (raw configs, seed 0 first)."""
    sweep = ranking_sweep([mixer], group)
    rung, values = next((k, v) for k, v in sweep.groups[0].grid.items() if k.startswith("task."))
    sweep.override({rung: values[len(values) // 2], "seed": list(range(seeds)), "trainer.max_steps": steps,
                    "callbacks.emergence.stop": False})
    return [raw for _, raw in sweep.raw_runs()]


def cell_clock(mixers: Sequence[str], families: Sequence[str] | None = None, steps: int = 100,
               seeds: int = SEEDS, say: Callable[[str], None] = print) -> list[dict]:
    """Per family (default: every group of ``RANKING``) and mixer: the seconds of one ranking cell
    (``cell_configs``, run as the sweep runs it) and their ratio to the Transformer's."""
    from emergence_bench.engine.seed_parallel import run_seed_parallel
    families = list(families or [g.name for g in load_sweep(RANKING).groups])
    order = [BASELINE] + [m for m in mixers if m != BASELINE]
    rows = []
    for family in families:
        seconds = {}
        for name in order:
            with tempfile.TemporaryDirectory(prefix="emergence-bench-cell-") as out:
                configs = cell_configs(name, family, steps, seeds)
                start = time.perf_counter()
                results = run_seed_parallel(configs, Path(out))
                seconds[name] = time.perf_counter() - start
            failed = [r["run_id"] for r in results if r.get("status") != "ok"]
            say(f"[speed:cell] {family} {name}: {seconds[name]:.1f} s" + (f" ({len(failed)} not ok)" if failed else ""))
            if name in mixers:
                rows.append({"family": family, "mixer": name, "seeds": seeds, "steps": steps,
                             "seconds": seconds[name], "vs_transformer": seconds[name] / seconds[BASELINE],
                             "not_ok": failed})
    return rows


def render_cells(rows: list[dict]) -> str:
    families = list(dict.fromkeys(r["family"] for r in rows))
    mixers = list(dict.fromkeys(r["mixer"] for r in rows))
    cell = {(r["family"], r["mixer"]): r for r in rows}
    lines = ["| mixer | " + " | ".join(families) + " |", "|---" * (len(families) + 1) + "|"]
    for name in mixers:
        cells = []
        for family in families:
            r = cell.get((family, name))
            cells.append("-" if r is None else ("1" if name == BASELINE else f"{r['vs_transformer']:.2f}")
                         + f" ({r['seconds']:.1f} s)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
