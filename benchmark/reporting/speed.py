"""`emergence-bench speed`: speed ratios measured side by side in one run on this machine.

Every number is a ratio of two timings taken in the same process, one after the other, so it says
something about the code rather than about the machine's load at one moment.
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F

from emergence_bench import registry
from emergence_bench.config import RunConfig, resolve
from emergence_bench.devices import resolve_device
from emergence_bench.execution.sweep import load_sweep
from emergence_bench.model import SequenceModel
from emergence_bench.results import write_json
from emergence_bench.mixers.backend import ENV

# Each mixer at the Transformer's width (d_model 64, 4 heads × 16).
WIDTH_MATCHED = {
    "transformer": {"n_heads": 4, "head_dim": 16},
    "mlp_mixer": {},
    "mamba": {},
    "gated_deltanet": {"n_heads": 4, "head_dim": 16},
    "rwkv7": {"head_dim": 16},
}


@contextmanager
def backend(name: str | None):
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


def step_seconds(mixer: dict, length: int, batch: int, d_model: int, device: str, repeats: int) -> float:
    """Median seconds of one training step (forward, backward, AdamW) of a 1-layer model."""
    torch.manual_seed(0)
    model = SequenceModel(2, length, mixer, d_model=d_model, n_layers=1).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 2, (batch, length + 1), device=device)

    def step():
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if device == "cuda":
            torch.cuda.synchronize()

    for _ in range(2):  # warm-up: allocator, kernels' autotuning
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def builtin_mixers() -> list[str]:
    """The registered mixers that ship with the suite (defined in ``emergence_bench.mixers``), not
    plugins or mixers registered elsewhere (e.g. by tests): the speed table compares the suite's own."""
    package = registry.mixers.builtin_package + "."
    return [name for name in registry.mixers.names() if registry.mixers.get(name).__module__.startswith(package)]


def mixer_ratios(lengths=(64, 256), batch: int = 8, d_model: int = 64, repeats: int = 5,
                 device: str | None = None) -> list[dict]:
    """Each built-in mixer's training-step time over the Transformer's, per sequence length;
    on CUDA also each kernel-backed mixer's kernel over its reference."""
    device = device or resolve_device("auto").type
    rows = []
    names = builtin_mixers()
    for length in lengths:
        with backend("reference"):
            base = step_seconds({"name": "transformer", **WIDTH_MATCHED["transformer"]}, length, batch,
                                d_model, device, repeats)
        for name in names:
            spec = {"name": name, **WIDTH_MATCHED.get(name, {})}
            with backend("reference"):
                seconds = step_seconds(spec, length, batch, d_model, device, repeats)
            row = {"mixer": name, "length": length, "device": device, "step_ms": seconds * 1e3,
                   "vs_transformer": seconds / base, "kernel_vs_reference": None}
            if device == "cuda" and "kernel" in getattr(registry.mixers.get(name), "backends", ()):
                with backend("kernel"):
                    row["kernel_vs_reference"] = step_seconds(spec, length, batch, d_model, device, repeats) / seconds
            rows.append(row)
    return rows


def render(rows: list[dict]) -> str:
    lines = ["| mixer | length | device | step (ms) | × transformer | kernel / reference |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        kernel = "-" if r["kernel_vs_reference"] is None else f"{r['kernel_vs_reference']:.2f}"
        lines.append(f"| {r['mixer']} | {r['length']} | {r['device']} | {r['step_ms']:.1f} | "
                     f"{r['vs_transformer']:.2f} | {kernel} |")
    return "\n".join(lines) + "\n"


# The models the suite-overhead rows measure, as runs of presets (preset, group, grid values): the
# `quick` preset's base run and the paper's linear map at S=16, s=8.
SUITE_RUNS = {
    "quick": ("quick", None, {"task.sparsity": 3}),
    "paper-linear-map": ("paper-linear-map", "S16", {"task.sparsity": 8}),
}


def preset_model(preset: str, group: str | None = None, values: dict | None = None) -> dict:
    """The task, mixer and model sections of the first run of ``preset`` (in ``group``, with the grid
    narrowed to ``values``, dotted keys), so the speed rows measure exactly the preset's model."""
    sweep = load_sweep(preset)
    if group is not None:
        sweep.select([group])
    sweep.override(values or {})
    _, config = sweep.raw_runs()[0]
    return {key: config[key] for key in ("task", "mixer", "model")}


def suite_models(names=tuple(SUITE_RUNS)) -> dict[str, dict]:
    """name -> the task, mixer and model sections of each of ``SUITE_RUNS`` named."""
    return {name: preset_model(*SUITE_RUNS[name]) for name in names}


class BareLoop:
    """The suite's training step without Lightning or callbacks: same model, data, loss, AdamW,
    clipping, and the same one host sync per step (the loss value)."""

    def __init__(self, config, compile_model: bool = False):
        from emergence_bench.run import build_model, build_task

        torch.manual_seed(config.seed)
        self.task = build_task(config)
        self.model = build_model(config, self.task)
        if compile_model:
            self.model.compile()  # as `trainer.compile: true` does in the suite
        self.forward = self.model
        o = config.optim
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=o.lr, weight_decay=o.weight_decay,
                                           betas=o.betas)
        self.clip = config.optim.grad_clip
        self.mask = self.task.loss_mask
        self.index = 0

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self.forward(tokens[:, :-1])[:, self.mask]
        return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:][:, self.mask].flatten())

    def step(self) -> tuple[float, float]:
        """One step; returns (seconds generating data, seconds in total)."""
        start = time.perf_counter()
        tokens = self.task.batch("train", self.index)
        data = time.perf_counter() - start
        self.index += 1
        loss = self.loss(tokens)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()
        loss.item()
        return data, time.perf_counter() - start

    def seconds_per_step(self, steps: int) -> tuple[float, float]:
        """(median step seconds, median data seconds) over ``steps`` steps after a warm-up."""
        for _ in range(3):
            self.step()
        data, total = zip(*(self.step() for _ in range(steps)))
        return statistics.median(total), statistics.median(data)


def suite_seconds_per_step(config, steps: int) -> float:
    """Marginal seconds per training step of `emergence_bench.run.run`: the wall time of a run of 2N steps
    minus one of N, over N, with a single eval at the end of each (so setup, eval and teardown cancel)."""
    from emergence_bench.run import run

    def wall(n: int) -> float:
        data = config.to_dict()
        data["trainer"].update(max_steps=n, eval_every=n)
        with tempfile.TemporaryDirectory() as scratch:
            start = time.perf_counter()
            record = run(data, scratch)
            seconds = time.perf_counter() - start
        return seconds - record["timing"]["eval_seconds"]

    wall(steps // 4)  # warm-up: imports, allocator
    return max(wall(2 * steps) - wall(steps), 1e-9) / steps


def matmul_flops_per_second(n: int = 1024, repeats: int = 10) -> float:
    """This machine's dense float32 matmul rate (the best of ``repeats``), the yardstick for FLOP/s."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def step_flops(loop: BareLoop) -> int:
    """FLOPs of one forward + backward of the bare loop's model (torch's flop counter)."""
    from torch.utils.flop_counter import FlopCounterMode

    tokens = loop.task.batch("train", 0)
    with FlopCounterMode(display=False) as counter:
        loop.loss(tokens).backward()
    loop.optimizer.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def suite_rows(steps: int = 100, models: dict | None = None, compile_check: bool = True) -> list[dict]:
    """Per model (name -> task, mixer and model sections; default: ``suite_models()``): suite vs bare
    loop, data-generation share, achieved FLOP/s vs matmul peak, and (optionally) a torch.compile'd
    bare loop vs the eager one."""
    peak = matmul_flops_per_second()
    rows = []
    for name, raw in (models or suite_models()).items():
        config = resolve({**raw, "trainer": {"accelerator": "cpu"}})
        bare = BareLoop(config)
        bare_step, data_step = bare.seconds_per_step(steps)
        suite_step = suite_seconds_per_step(config, steps)
        flops = step_flops(bare)
        row = {"model": name, "suite_ms": suite_step * 1e3, "bare_ms": bare_step * 1e3,
               "suite_vs_bare": suite_step / bare_step, "data_share": data_step / bare_step,
               "gflops": flops / suite_step / 1e9, "matmul_peak_gflops": peak / 1e9,
               "fraction_of_peak": flops / suite_step / peak, "compiled_vs_eager": None, "compile_error": None}
        if compile_check:
            try:
                compiled_step, _ = BareLoop(config, compile_model=True).seconds_per_step(steps)
                row["compiled_vs_eager"] = compiled_step / bare_step
            except Exception as error:  # a compiler toolchain problem is a finding, not a crash
                row["compile_error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
        rows.append(row)
    return rows


def render_suite(rows: list[dict]) -> str:
    lines = ["| model | suite step (ms) | bare loop (ms) | suite / bare | data share | GFLOP/s | "
             "of matmul peak | compiled / eager |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        compiled = (f"{r['compiled_vs_eager']:.2f}" if r["compiled_vs_eager"] is not None
                    else f"failed: {r['compile_error']}" if r["compile_error"] else "-")
        lines.append(f"| {r['model']} | {r['suite_ms']:.2f} | {r['bare_ms']:.2f} | {r['suite_vs_bare']:.2f} | "
                     f"{r['data_share']:.1%} | {r['gflops']:.1f} | {r['fraction_of_peak']:.1%} "
                     f"(of {r['matmul_peak_gflops']:.0f}) | {compiled} |")
    return "\n".join(lines) + "\n"


def quick_config(steps: int = 100) -> dict:
    """The ``quick`` preset's base run (linear map S=8 s=3, d_model 64, 8 heads × 8, batch 128)
    with ``steps`` training steps and the preset's eval cadence."""
    base = load_sweep("quick").base
    base.setdefault("trainer", {})["max_steps"] = steps
    return base


def throughput(config: dict | RunConfig | None = None, ks=(1, 4, 16), steps: int = 100, repeats: int = 1,
               out: str | Path | None = None) -> list[dict]:
    """Seed-parallel vs one seed at a time, side by side in this process: for each K, K seeds of
    ``config`` (default: the quick preset at ``steps`` steps) run one after another with
    ``emergence_bench.run.run``, then together with ``run_seed_parallel``; whole runs (setup, evals,
    result files), wall-clock, each mode the best of ``repeats`` alternating tries.

    Returns one row per K: {k, steps, sequential_s, parallel_s, speedup (sequential_s /
    parallel_s), seed_steps_per_s_sequential, seed_steps_per_s_parallel, mode ("vmap", or the
    fallback reason when the model cannot be batched)}.
    """
    from emergence_bench.execution.seed_parallel import run_seed_parallel
    from emergence_bench.run import run

    base = resolve(config if config is not None else quick_config(steps)).to_dict()
    steps = base["trainer"]["max_steps"]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(out) if out is not None else Path(scratch)
        warm = {**base, "trainer": {**base["trainer"], "max_steps": 2}}
        run(warm, root / "warmup")  # first-call costs (allocator, TensorBoard, the vmap rule) off the clock
        run_seed_parallel([warm], root / "warmup")
        for K in ks:
            configs = [{**base, "seed": base["seed"] + i} for i in range(K)]
            sequential = parallel = math.inf
            for attempt in range(repeats):
                start = time.perf_counter()
                for c in configs:
                    run(c, root / f"k{K}" / "sequential")
                sequential = min(sequential, time.perf_counter() - start)
                start = time.perf_counter()
                note = run_seed_parallel(configs, root / f"k{K}" / "parallel")[0]["seed_parallel"]
                parallel = min(parallel, time.perf_counter() - start)
            rows.append({
                "k": K, "steps": steps, "sequential_s": sequential, "parallel_s": parallel,
                "speedup": sequential / parallel,
                "seed_steps_per_s_sequential": K * steps / sequential,
                "seed_steps_per_s_parallel": K * steps / parallel,
                "mode": "vmap" if "group" in note else note["fallback"],
            })
    return rows


def seed_parallel_rows(ks=(1, 4, 16), steps: int = 100) -> list[dict]:
    """K seeds of the `quick` config trained together vs one after another (whole runs)."""
    return throughput(ks=ks, steps=steps)


def render_seeds(rows: list[dict]) -> str:
    lines = ["| seeds K | sequential (s) | seed-parallel (s) | speed-up | seed-steps/s sequential → parallel | mode |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['k']} | {r['sequential_s']:.1f} | {r['parallel_s']:.1f} | {r['speedup']:.2f}× | "
                     f"{r['seed_steps_per_s_sequential']:.0f} → {r['seed_steps_per_s_parallel']:.0f} | {r['mode']} |")
    return "\n".join(lines) + "\n"


def main(out: str | Path, lengths=(64, 256), repeats: int = 5, quick: bool = False, steps: int = 100) -> dict:
    """Print the speed tables and write them as JSON to ``out``."""
    if quick:  # a smoke run: tiny and fast, same code paths
        lengths, repeats, steps = (16,), 1, 8
    suite = suite_rows(steps=steps, models=suite_models(["quick"]) if quick else None,
                       compile_check=not quick)
    print(render_suite(suite))
    seeds = seed_parallel_rows(ks=(1, 2) if quick else (1, 4, 16), steps=4 if quick else steps)
    print(render_seeds(seeds))
    rows = mixer_ratios(lengths=lengths, repeats=repeats)
    print(render(rows), end="")
    report = {"threads": torch.get_num_threads(), "torch": torch.__version__, "suite": suite,
              "seed_parallel": seeds, "mixers": rows}
    write_json(Path(out), report)
    return report
