"""`emergence-bench speed`: speed ratios measured side by side in one run on this machine.

Every number is a ratio of two timings taken in the same process, one after the other, so it says
something about the code rather than about the machine's load at one moment.
"""

from __future__ import annotations

import os
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmark import registry
from benchmark.model import SequenceModel
from benchmark.results import write_json
from mixers.backend import ENV

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


def mixer_ratios(lengths=(64, 256), batch: int = 8, d_model: int = 64, repeats: int = 5,
                 device: str | None = None) -> list[dict]:
    """Each registered mixer's training-step time over the Transformer's, per sequence length;
    on CUDA also each kernel-backed mixer's kernel over its reference."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    rows = []
    names = [n for n in registry.mixers.names() if not n.startswith("test_")]
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


def main(out: str | Path, lengths=(64, 256), repeats: int = 5, quick: bool = False) -> dict:
    """Print the speed table and write it as JSON to ``out``."""
    if quick:  # a smoke run: tiny and fast, same code path
        lengths, repeats = (16,), 1
    rows = mixer_ratios(lengths=lengths, repeats=repeats)
    report = {"threads": torch.get_num_threads(), "torch": torch.__version__, "mixers": rows}
    print(render(rows), end="")
    write_json(Path(out), report)
    return report
