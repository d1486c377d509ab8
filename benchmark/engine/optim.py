"""The suite's optimiser: AdamW (fused where torch allows, with a workaround for a torch bug) over
parameter groups that spare what mixers mark undecayed, and the lr schedule, stepped per training step.
A single run and a seed-parallel group's seed stack (one AdamW over stacked [K, ...] tensors *is* K
AdamWs, AdamW being elementwise) build theirs here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, overload

import torch

from emergence_bench.config import OptimConfig


class FusedAdamW(torch.optim.AdamW):
    """torch's AdamW, fused (one kernel per parameter group instead of a dozen small ops per tensor:
    6× faster on the quick model's CPU step), with every gradient made contiguous first: torch's
    fused CPU kernel reads a strided gradient's memory as if it were contiguous (found with torch
    2.13, where it gave wrong updates for the transposed gradients vmap produces)."""

    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:  # Lightning's closure: forward, backward, clipping
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and not p.grad.is_contiguous():
                    p.grad = p.grad.contiguous()
        super().step()
        return loss


def adamw(params: list[torch.nn.Parameter], decayed: list[bool], optim: OptimConfig, max_steps: int,
          initial_state: dict | None = None) -> dict:
    """AdamW over ``params`` (weight decay only where ``decayed``) with the lr schedule of ``optim``,
    stepped per training step, in the form ``configure_optimizers`` returns. ``initial_state`` (an
    optimizer state_dict from a curriculum stage) carries the moments over; the lr restarts."""
    groups: list[dict[str, Any]] = [{"params": [p for p, d in zip(params, decayed) if d]}]
    if not all(decayed):
        groups.append({"params": [p for p, d in zip(params, decayed) if not d], "weight_decay": 0.0})
    fused = all(p.device.type in ("cpu", "cuda") and p.dtype.is_floating_point for p in params)
    optimizer = FusedAdamW(groups, lr=optim.lr, weight_decay=optim.weight_decay, betas=optim.betas,
                           fused=fused or None)
    if initial_state is not None:
        optimizer.load_state_dict(initial_state)
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"] = optim.lr
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(optim, max_steps))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def is_decayed(param: torch.nn.Parameter) -> bool:
    """Mixers mark parameters that must not be decayed (SSM decay rates, step-size biases)."""
    return not getattr(param, "_no_weight_decay", False)


def lr_factor(optim: OptimConfig, max_steps: int) -> Callable[[int], float]:
    """step -> multiplier of the base lr: linear warmup, then constant, cosine or linear decay to 0."""

    def factor(step: int) -> float:
        if step < optim.warmup_steps:
            return (step + 1) / optim.warmup_steps
        if optim.schedule == "constant":
            return 1.0
        progress = min(1.0, (step - optim.warmup_steps) / max(1, max_steps - optim.warmup_steps))
        if optim.schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0 - progress

    return factor
