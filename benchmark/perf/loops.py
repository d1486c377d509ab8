"""What `speed` times: the suite's own training step (``emergence_bench.engine.training.step`` inside the run's
``EmergenceModule`` or the seed stack, then ``training.update``), looped without Lightning.

``single_loop`` is one seed as ``run()`` builds it (same init, same train stream); ``stacked_loop``
is K seeds as a seed-parallel group builds them; ``step_seconds`` is one step of a 1-layer model of
any mixer on random bits, the yardstick of the mixer table and of `check-mixer`.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import cast

import lightning as L
import torch

from emergence_bench.config import OptimConfig, RunConfig, TrainerConfig
from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.module import EmergenceModule
from emergence_bench.engine.training import StepLoop
from emergence_bench.tasks.base import SyntheticTask


def single_loop(config: RunConfig, compile_model: bool = False, device: str | torch.device = "cpu") -> StepLoop:
    """One seed of ``config`` trained by the suite's step: the model built as ``run()`` builds it
    (seed, task, model), batch i = ``task.batch("train", i)`` ([B, L+1]), the run's AdamW, schedule,
    clipping and loss read-back every ``trainer.log_every`` steps."""
    from emergence_bench.engine.run import build_model, build_task

    L.seed_everything(config.seed, verbose=False)
    task = build_task(config)
    model = build_model(config, task)
    if compile_model:
        model.compile()  # as `trainer.compile: true` does in the suite
    t = config.trainer
    module = EmergenceModule(model, task, config.optim, t.max_steps, t.train_on, read_every=t.log_every,
                             batch_order=t.batch_order).to(device)
    return StepLoop(module, lambda i: task.batch("train", i), config.optim.grad_clip, device)


def stacked_loop(config: RunConfig, K: int, device: str | torch.device = "cpu") -> StepLoop:
    """K seeds of ``config`` (seed, seed + 1, ...) trained by the stack's step: seed k starts from
    the weights ``single_loop`` of seed + k starts from, and slice k of batch i ([K, B, L+1]) is that
    seed's own ``batch("train", i)``."""
    from emergence_bench.engine.run import build_model, build_task
    from emergence_bench.engine.seed_stack import SeedStack

    tasks, models = [], []
    for k in range(K):
        seed = dataclasses.replace(config, seed=config.seed + k)
        L.seed_everything(seed.seed, verbose=False)  # run()'s order: seed, task, model
        tasks.append(build_task(seed))
        models.append(build_model(seed, tasks[-1]))
    t = config.trainer
    stack = SeedStack(models, tasks[0], config.optim, t.max_steps, t.train_on, t.log_every,
                      t.batch_order).to(device)
    return StepLoop(stack, lambda i: torch.stack([task.batch("train", i) for task in tasks]),
                    config.optim.grad_clip, device)


class RandomBits:
    """``step_seconds``' data, in the part of the task interface the training step reads: one batch
    of random bits [B, L+1], every row scored (a mixer's cost does not depend on what it reads)."""

    per_sequence_scoring = False  # the same rows in every sequence: loss_mask's

    def __init__(self, length: int, batch: int) -> None:
        self.loss_mask = torch.ones(length, dtype=torch.bool)  # [L]
        self.tokens = torch.randint(0, 2, (batch, length + 1))

    def model_inputs(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens[:, :-1]


def step_seconds(mixer: dict, length: int, batch: int, d_model: int, device: str, repeats: int) -> float:
    """Median seconds of one training step of the suite (``training.step``, backward, clipping, the
    suite's AdamW) of a 1-layer model of ``mixer`` on ``batch`` sequences of ``length`` random bits."""
    torch.manual_seed(0)
    data = RandomBits(length, batch)
    model = SequenceModel(2, length, mixer, d_model=d_model, n_layers=1)
    optim, trainer = OptimConfig(), TrainerConfig()
    task = cast(SyntheticTask, data)  # it has what the step reads of a task
    module = EmergenceModule(model, task, optim, trainer.max_steps, "all", read_every=trainer.log_every).to(device)
    loop = StepLoop(module, lambda i: data.tokens, optim.grad_clip, device)
    loop.run(2)  # warm-up: allocator, kernels' autotuning
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        loop.run(1)
        times.append(time.perf_counter() - start)
    return statistics.median(times)
