"""The one Lightning Trainer of the suite: a run, a seed-parallel group and a curriculum stage all
train with ``build_trainer``."""

from __future__ import annotations

import csv
import logging
import os
import warnings
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger

from emergence_bench.config import RunConfig
from emergence_bench.results.store import CSV_DIR, TENSORBOARD_DIR, WANDB_DIR

LOG_DIRS = {"tensorboard": TENSORBOARD_DIR, "csv": CSV_DIR, "wandb": WANDB_DIR}  # by trainer.logger


def quiet_lightning() -> None:
    """Keep the terminal for the suite's own progress lines."""
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    logging.getLogger("lightning.fabric").setLevel(logging.ERROR)
    for message in (".*LeafSpec.*", ".*does not have many workers.*", ".*IterableDataset.*",
                    ".*LightningDataModule.*hparams.*", ".*You called `self.log.*", ".*tensorboardX.*",
                    ".*`training_step` returned `None`.*",
                    ".*exists and is not empty.*"):  # a resumed run's csv logs: appended to, not deleted
        warnings.filterwarnings("ignore", message=message)


def build_logger(config: RunConfig, run_dir: Path, stage: int | None = None, purge_step: int | None = None) -> Logger:
    """The Lightning logger ``trainer.logger`` names, writing under ``run_dir``: ``tensorboard/``
    (TensorBoard event files), ``csv/metrics.csv`` (one row per logged step) or ``wandb/`` (Weights &
    Biases, offline unless WANDB_MODE=online; project WANDB_PROJECT, default emergence-bench). A
    curriculum's ``stage`` logs into ``stage<k>/`` below that folder (wandb: a run of its own).
    ``purge_step`` (a resumed run's step): what the run logged before that step is kept, what it
    logged from there on before it stopped is dropped (TensorBoard: hidden; wandb: a new run)."""
    kind, run_dir = config.trainer.logger, Path(run_dir)
    version = LOG_DIRS[kind] + (f"/stage{stage}" if stage is not None else "")
    if kind == "csv":
        logger = CSVLogger(save_dir=run_dir, name="", version=version)
        if purge_step is not None:
            _keep_rows(logger, purge_step)
        return logger
    if kind == "wandb":
        from lightning.pytorch.loggers import WandbLogger  # wandb itself is optional (the `wandb` extra)

        name = run_dir.name + (f"-stage{stage}" if stage is not None else "")
        return WandbLogger(name=name, save_dir=run_dir, offline=os.environ.get("WANDB_MODE") != "online",
                           project=os.environ.get("WANDB_PROJECT", "emergence-bench"))
    purge: dict[str, Any] = {} if purge_step is None else {"purge_step": purge_step}
    return TensorBoardLogger(save_dir=run_dir, name="", version=version, default_hp_metric=False, **purge)


def _keep_rows(logger: CSVLogger, before: int) -> None:
    """A resumed run's csv/metrics.csv, which Lightning's writer deletes as it starts: its rows of the
    steps before ``before`` go back into the writer, written again with the new ones."""
    path = Path(logger.log_dir) / "metrics.csv"
    rows = list(csv.DictReader(path.open(newline=""))) if path.is_file() else []
    logger.experiment.metrics[:0] = [row for row in rows if float(row["step"]) < before]


def build_trainer(config: RunConfig, callbacks: list, logger: Logger | bool, root_dir: Path,
                  max_steps: int | None = None, evaluate: bool = True) -> L.Trainer:
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
