"""Curricula: stages of other tasks trained before a run's own task, the model carried over.

Each stage trains the same SequenceModel on its task for its steps (no measurements, its loss in
the logger's folder under ``stage<k>/``); between stages the embeddings and head are re-initialised or
resized when the vocabulary changes, and AdamW restarts unless ``reset_optimizer`` is false. The run's
own task then trains from step 0 with every callback, so plateau and emergence are measured on it.
"""

from __future__ import annotations

import time
from pathlib import Path

from emergence_bench import registry
from emergence_bench.config import RunConfig
from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.module import EmergenceModule
from emergence_bench.engine.trainer import build_logger, build_trainer
from emergence_bench.tasks.base import SyntheticTask


def stage_tasks(config: RunConfig) -> list[SyntheticTask]:
    """Each stage's task, with the run's data seed (its own streams) and a small eval set."""
    tasks = []
    for stage in config.curriculum:
        task = registry.tasks.get(stage.task.name)(**stage.task.params)
        task.configure_streams(data_seed=config.seed, eval_batches=1)
        tasks.append(task)
    return tasks


def check_transitions(config: RunConfig, tasks: list[SyntheticTask], final: SyntheticTask) -> None:
    """A kept optimizer state needs the same parameter shapes on both sides of the switch."""
    following = tasks[1:] + [final]
    for i, (stage, task, after) in enumerate(zip(config.curriculum, tasks, following)):
        if not stage.reset_optimizer and task.vocab_size != after.vocab_size:
            raise ValueError(f"curriculum[{i}].reset_optimizer is false but the vocabulary changes "
                             f"({task.vocab_size} → {after.vocab_size}); the optimizer state cannot carry over")


def pretrain(config: RunConfig, model: SequenceModel, final: SyntheticTask,
             run_dir: Path) -> tuple[dict | None, list[dict]]:
    """Train ``model`` through the curriculum's stages, leaving it ready for ``final``'s vocabulary.
    Returns (the optimizer state to carry into the final stage or None, a report per stage)."""
    tasks = stage_tasks(config)
    carried, report = None, []
    following = tasks[1:] + [final]
    for k, (stage, task, after) in enumerate(zip(config.curriculum, tasks, following)):
        module = EmergenceModule(model, task, config.optim, stage.steps, initial_optimizer_state=carried,
                                 read_every=config.trainer.log_every, batch_order=config.trainer.batch_order)
        logger = build_logger(config, run_dir, stage=k)
        trainer = build_trainer(config, [], logger, run_dir, max_steps=stage.steps, evaluate=False)
        started = time.perf_counter()
        trainer.fit(module, task)
        recent = list(module.recent_train_losses)
        report.append({"task": stage.task.name, "steps": trainer.global_step,
                       "final_train_loss": sum(recent) / len(recent) if recent else None,
                       "seconds": round(time.perf_counter() - started, 3)})
        carried = None if stage.reset_optimizer else trainer.optimizers[0].state_dict()
        if after.vocab_size != task.vocab_size:
            model.set_vocab(after.vocab_size, stage.vocab)
    return carried, report
