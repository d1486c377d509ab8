"""Whether a planned config's model trains as a vmapped seed stack here (a trial against each seed
alone), and how much faster K seeds train batched than one by one (the batching probe). Both use the
plan's task: they build models, never a second task."""

from __future__ import annotations

import math
import statistics
import time

import torch

from emergence_bench.config import RunConfig
from emergence_bench.engine.batching import vmapped
from emergence_bench.engine.module import EmergenceModule
from emergence_bench.engine.run import RunPlan, build_model
from emergence_bench.engine.seed_stack import SeedStack
from emergence_bench.engine.training import StepLoop, sequence_mask, train_losses
from emergence_bench.machine.devices import accelerator_device
from emergence_bench.mixers.base import MixerContext
from emergence_bench.tasks.base import SyntheticTask, seeded_generator


def seed_parallel_supported(planned: RunPlan) -> tuple[bool, str]:
    """Whether the planned config's model trains as a vmapped seed stack here, and why not.

    A trial on two differently initialised copies of the model and two sequences: the batched
    loss, gradients and eval logits (with and without an attention bias, where a mixer takes one)
    must equal each copy's own, within float tolerance. Any error (an ``autograd.Function``
    without vmap support, a GPU kernel, randomness) or mismatch gives (False, reason).
    Leaves the global RNG state as it was.
    """
    config = planned.config
    if config.curriculum:  # each seed's stages would train alone first, their AdamW states apart
        return False, "a curriculum's stages are trained one seed at a time"
    device = accelerator_device(config.trainer.accelerator)
    if device is None:
        return False, f"trainer.accelerator={config.trainer.accelerator} but no CUDA device"
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            problem = _trial(config, planned.task, device)
    except Exception as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return False, f"vmap trial failed: {type(error).__name__}: {message}"
    if problem:
        return False, problem
    return True, "vmap over seeds"


def _trial(config: RunConfig, task: SyntheticTask, device: torch.device) -> str | None:
    models = []
    for k in range(2):
        torch.manual_seed(config.seed + k)
        models.append(build_model(config, task).to(device))
    stack = SeedStack(models, task, config.optim, config.trainer.max_steps, config.trainer.train_on).to(device)
    tokens = torch.stack([task.generate(seeded_generator("seed_parallel.trial", k), 2) for k in range(2)]).to(device)
    biases: list[dict[int, torch.Tensor]] = [{}]
    attention = [i for i, m in enumerate(models[0].mixers) if getattr(m, "exposes_attention", False)]
    if attention:  # the intervention's code path (explicit logits) too
        biases.append({i: torch.zeros(2, 1, 1, task.seq_len, task.seq_len, device=device) for i in attention})
    for bias in biases:
        scored, full = stack.losses(tokens, bias)
        trained = full if config.trainer.train_on == "all" else scored
        for p in stack.stacked:
            p.grad = None
        with vmapped(device):
            trained.sum().backward()
        with torch.no_grad():
            eval_logits = stack.logits(tokens[0], bias)  # [K, B, L, V]
        for k, model in enumerate(models):
            ctx = lambda: MixerContext(bias={i: b[k] for i, b in bias.items()})  # noqa: E731  (fresh per forward)
            model.train()
            own_scored, own_full = train_losses(model(task.model_inputs(tokens[k]), ctx()), tokens[k, :, 1:],
                                                stack.rows, config.trainer.train_on,
                                                sequence_mask(task, tokens[k]))
            loss = own_full if config.trainer.train_on == "all" else own_scored
            model.zero_grad(set_to_none=True)
            loss.backward()
            batched_loss, own_loss = float(trained[k].detach()), float(loss.detach())
            if not math.isclose(batched_loss, own_loss, rel_tol=1e-4, abs_tol=1e-5):
                return f"vmap trial: batched loss {batched_loss:.6g} != per-seed loss {own_loss:.6g}"
            # Each gradient is judged at its own scale, floored at 1e-4 of the model's largest: a
            # gradient below that floor is float noise (mLSTM's input-gate bias, whose common shift
            # the normaliser divides out, sits at 1e-6 of it), and its batched sum differs in
            # relative terms without vmap being wrong.
            largest = max((float(p.grad.abs().max()) for p in model.parameters() if p.grad is not None), default=0.0)
            for name, p, batched in zip(stack.names, model.parameters(), stack.stacked):
                if (p.grad is None) != (batched.grad is None):
                    return f"vmap trial: gradient of {name} present in one form only"
                if p.grad is not None:
                    scale = float(p.grad.abs().max()) + 1e-4 * largest + 1e-6
                    if float((batched.grad[k] - p.grad).abs().max()) > 1e-3 * scale:
                        return f"vmap trial: batched gradient of {name} differs from the per-seed one"
            model.eval()
            with torch.no_grad():
                own_logits = model(task.model_inputs(tokens[0]), ctx())
            if not torch.allclose(eval_logits[k], own_logits, rtol=1e-4, atol=1e-5):
                return "vmap trial: batched eval logits differ from the per-seed ones"
    return None


def batching_speedup(planned: RunPlan, k: int, rounds: int = 3) -> float:
    """How much faster K seeds train batched than one after another, measured here and now: the
    median over ``rounds`` of (K × one seed's training step) / (one batched step of K seeds), each
    a whole step (data, the suite's ``training.step``, then backward, clipping, AdamW and the lr
    schedule: ``training.StepLoop``) after a warm-up. Lightning's per-step
    overhead, which batching also saves, is left out, so the estimate errs towards one by one."""
    config, task = planned.config, planned.task
    device = accelerator_device(config.trainer.accelerator) or torch.device("cpu")
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        models = [build_model(config, task).to(device) for _ in range(k)]
        t, o = config.trainer, config.optim
        stack = SeedStack(models, task, o, t.max_steps, t.train_on, t.log_every).to(device)
        single = EmergenceModule(models[0], task, o, t.max_steps, t.train_on, read_every=t.log_every).to(device)
        batched = StepLoop(stack, lambda i: torch.stack([task.batch("train", i)] * k), o.grad_clip, device)
        one = StepLoop(single, lambda i: task.batch("train", i), o.grad_clip, device)

        def seconds(loop: StepLoop) -> float:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            loop.run(1)
            return time.perf_counter() - start

        batched.run(2)  # warm-up: allocator, the batching rule, first-call costs
        one.run(2)
        ratios = [k * seconds(one) / seconds(batched) for _ in range(rounds)]
    return statistics.median(ratios)
