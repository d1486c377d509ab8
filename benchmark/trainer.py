"""The one Lightning Trainer of the suite: a run, a seed-parallel group and a curriculum stage all
train with ``build_trainer``."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import lightning as L

from emergence_bench.config import RunConfig


def quiet_lightning() -> None:
    """Keep the terminal for the suite's own progress lines."""
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    logging.getLogger("lightning.fabric").setLevel(logging.ERROR)
    for message in (".*LeafSpec.*", ".*does not have many workers.*", ".*IterableDataset.*", ".*LightningDataModule.*hparams.*",
                    ".*You called `self.log.*", ".*tensorboardX.*", ".*`training_step` returned `None`.*"):
        warnings.filterwarnings("ignore", message=message)


def build_trainer(config: RunConfig, callbacks: list, logger, root_dir: Path, max_steps: int | None = None,
                  evaluate: bool = True) -> L.Trainer:
    """The Lightning Trainer of every training in the suite: a run, a seed-parallel group, a
    curriculum stage (``max_steps`` of its own, no evals)."""
    t = config.trainer
    return L.Trainer(
        accelerator=t.accelerator, devices=1, max_steps=t.max_steps if max_steps is None else max_steps,
        val_check_interval=t.eval_every if evaluate else None, check_val_every_n_epoch=None,
        limit_val_batches=t.eval_batches if evaluate else 0, num_sanity_val_steps=0, log_every_n_steps=t.log_every,
        gradient_clip_val=config.optim.grad_clip or None, logger=logger, callbacks=callbacks,
        default_root_dir=root_dir, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )
