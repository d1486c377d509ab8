"""emergence_bench.run(config, out): one experiment from a config to a result.json.

    DIR/<run_id>/config.yaml     the fully resolved config (re-run it with `emergence-bench run`)
    DIR/<run_id>/tensorboard/    TensorBoard logs
    DIR/<run_id>/result.json     the result row, written atomically at the end (ok | diverged | failed)
    DIR/<run_id>/checkpoints/    model weights at the steps of `checkpoints:` (when configured)
"""

from __future__ import annotations

import logging
import shutil
import time
import traceback
import warnings
from pathlib import Path

import lightning as L
import torch
import yaml
from lightning.pytorch.loggers import TensorBoardLogger

from emergence_bench import registry
from emergence_bench.config import RunConfig, resolve
from emergence_bench.curriculum import check_transitions, pretrain, stage_tasks
from emergence_bench.model import SequenceModel
from emergence_bench.module import Diverged, EmergenceModule
from emergence_bench.results import RESULT_FILE, SCHEMA_VERSION, versions, write_json, write_text
from emergence_bench.callbacks.checkpoints import CheckpointSchedule
from emergence_bench.mixers.init import WeightInit
from emergence_bench.callbacks.progress import ProgressLine
from emergence_bench.callbacks.recorder import Recorder
from emergence_bench.tasks.base import SyntheticTask


def quiet_lightning() -> None:
    """Keep the terminal for the suite's own progress lines."""
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    logging.getLogger("lightning.fabric").setLevel(logging.ERROR)
    for message in (".*LeafSpec.*", ".*does not have many workers.*", ".*IterableDataset.*", ".*LightningDataModule.*hparams.*",
                    ".*You called `self.log.*", ".*tensorboardX.*"):
        warnings.filterwarnings("ignore", message=message)


def build_task(config: RunConfig) -> SyntheticTask:
    params = {k: v for k, v in config.task.items() if k != "name"}
    task = registry.tasks.get(config.task["name"])(**params)
    task.configure_streams(data_seed=config.seed, eval_batches=config.trainer.eval_batches)
    return task


def build_model(config: RunConfig, task: SyntheticTask) -> SequenceModel:
    """The run's model; with a curriculum, sized for its first stage's vocabulary and the longest task."""
    m = config.model
    vocab, max_len = task.vocab_size, task.seq_len
    if config.curriculum:
        stages = stage_tasks(config)
        vocab, max_len = stages[0].vocab_size, max([max_len] + [t.seq_len for t in stages])
    return SequenceModel(vocab, max_len, config.mixer, m.d_model, m.n_layers, m.mlp_ratio,
                         WeightInit(m.init, m.init_std, m.init_scale))


def check(config: dict | RunConfig) -> RunConfig:
    """Resolve ``config`` and build its task and model (without allocating weights), so every bad
    key or parameter raises here, before anything trains."""
    config = resolve(config)
    task = build_task(config)
    with torch.device("meta"):
        model = build_model(config, task)
    for callback in build_callbacks(config, task):
        if callable(getattr(callback, "check_model", None)):  # e.g. a bias naming a layer the model lacks
            callback.check_model(model)
    if config.curriculum:
        check_transitions(config, stage_tasks(config), task)
    return config


def build_callbacks(config: RunConfig, task: SyntheticTask) -> list[L.Callback]:
    return [registry.callbacks.get(name)(task=task, **params) for name, params in config.callbacks.items()]


def run(config: dict | RunConfig, out: str | Path, progress: bool = False) -> dict:
    """Train one config and write its result row under ``out/<run_id>/``; returns the row.

    A NaN loss gives status ``diverged`` and any other error ``failed`` (with the traceback);
    an interrupt (Ctrl-C) raises KeyboardInterrupt and writes nothing, so a resumed sweep runs it again.
    """
    config = check(config)
    quiet_lightning()
    run_id = config.run_id()
    run_dir = Path(out) / run_id
    if run_dir.exists():  # leftovers of an interrupted attempt
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    write_text(run_dir / "config.yaml", yaml.safe_dump(config.to_dict(), sort_keys=False))

    record = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "status": "ok",
        "error": None,
        "seed": config.seed,
        "config": config.to_dict(),
        "backend": None,
        "device": None,
        "versions": versions(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    trainer = module = None
    recorder = Recorder(curve_every=config.trainer.log_every)
    try:
        L.seed_everything(config.seed, verbose=False)
        task = build_task(config)
        model = build_model(config, task)
        if config.trainer.compile:
            model.compile()  # in place: parameter names (and checkpoints) stay as they are
        carried = None
        if config.curriculum:
            carried, record["curriculum"] = pretrain(config, model, task, run_dir, config.trainer.accelerator)
        module = EmergenceModule(model, task, config.optim, config.trainer.max_steps, config.trainer.train_on)
        module.initial_optimizer_state = carried
        callbacks = build_callbacks(config, task) + [recorder]
        if config.checkpoints.every or config.checkpoints.log_spaced:
            callbacks.append(CheckpointSchedule(run_dir, config.trainer.max_steps, config.checkpoints.every,
                                                config.checkpoints.log_spaced))
        if progress:
            callbacks.append(ProgressLine(prefix=f"[{run_id}] "))
        t = config.trainer
        trainer = L.Trainer(
            accelerator=t.accelerator, devices=1, max_steps=t.max_steps,
            val_check_interval=t.eval_every, check_val_every_n_epoch=None, limit_val_batches=t.eval_batches,
            num_sanity_val_steps=0, log_every_n_steps=t.log_every,
            gradient_clip_val=config.optim.grad_clip or None,
            logger=TensorBoardLogger(save_dir=run_dir, name="", version="tensorboard", default_hp_metric=False),
            callbacks=callbacks, default_root_dir=run_dir, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(module, task)
    except SystemExit:  # Lightning turns Ctrl-C into exit(1) after a graceful shutdown
        raise KeyboardInterrupt(f"run {run_id} interrupted") from None
    except Diverged as error:
        record.update(status="diverged", error=str(error))
    except Exception as error:
        record.update(status="failed", error=f"{type(error).__name__}: {error}\n{traceback.format_exc()}")
    if module is not None:
        record["backend"] = "+".join(sorted({getattr(m, "backend", "torch") for m in module.model.mixers}))
        record["device"] = describe_device(module.device)
    record.update(recorder.columns(trainer, module))
    write_json(run_dir / RESULT_FILE, record)
    return record


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return device.type
