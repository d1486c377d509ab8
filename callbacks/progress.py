"""ProgressLine: one line per eval, for watching a single run in a terminal."""

from __future__ import annotations

import sys
from typing import Any, TextIO

import lightning as L


class ProgressLine(L.Callback):
    def __init__(self, prefix: str = "", stream: TextIO = sys.stderr) -> None:
        self.prefix, self.stream = prefix, stream

    def on_validation_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        e = pl_module.last_eval
        print(
            f"{self.prefix}step {trainer.global_step:>6}/{trainer.max_steps}  "
            f"train {pl_module.last_train_loss:.4f}  eval {e.loss:.4f}  acc {e.accuracy:.3f}",
            file=self.stream, flush=True,
        )
