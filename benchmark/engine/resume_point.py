"""A resume point: what a run, or a seed-parallel group, needs to go on from a step exactly as if it
had never stopped, saved every ``trainer.resume_every_s`` seconds of training into its results
folder, and taken up when the same runs train again (a rerun of the sweep, or of `run`).

    DIR/.resume/<name>.ckpt    one per run or group in flight, named by the runs it continues
                               (``point_path``); removed once every one of them has its row

A point is the fit's Lightning checkpoint (the weights, AdamW's and the lr schedule's state, the
loops' counters and so the global step, every trainer callback's ``state_dict``), which the module
and the callbacks fill with the rest through their checkpoint hooks (the losses not read back yet, a
group's live seeds and each seed's callbacks), plus this module's header under ``KEY``: which runs it
continues and their resolved configs, the code and machine it was computed with, the torch RNG state,
its step. ``trainer.fit(..., ckpt_path=point.path)`` goes on from it: Lightning restores what it
saved, and a task's train stream starts at the restored step (tasks/base.py).

It is saved only where going on from it is exact (``ResumePoints.safe``): after a training step
(its update and the lr schedule's step done) that no eval follows, while no seed is stopping. A point
applies only to the very runs it continues, with the same configs (but ``resume_every_s``), code,
device and threads (``Point.mismatch``); any other is refused in one line and removed, and the runs
train from step 0.
"""

from __future__ import annotations

import hashlib
import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import Logger

from emergence_bench.config import RunConfig
from emergence_bench.machine.devices import accelerator_device
from emergence_bench.results.atomic import write_atomic
from emergence_bench.results.store import RESUME_DIR, git_state, versions

KEY = "emergence_bench_resume"  # the header's key in the checkpoint
FORMAT = 1  # what a point holds; a point of another format is refused


def point_path(out: str | Path, run_ids: Iterable[str]) -> Path:
    """Where the point that continues ``run_ids`` (the runs without a row yet) lives."""
    digest = hashlib.sha256("\n".join(sorted(run_ids)).encode()).hexdigest()[:16]
    return Path(out) / RESUME_DIR / f"{digest}.ckpt"


def compared(config: RunConfig) -> dict:
    """What of a config must be the same for a point to apply: all of it but how often points are saved."""
    data = config.to_dict()
    data["trainer"].pop("resume_every_s", None)
    return data


def environment(accelerator: str) -> dict:
    """What a run's numbers depend on beside its config: the code, the device (``trainer.accelerator``'s
    here), the threads (as now set)."""
    device = accelerator_device(accelerator) or torch.device("cpu")
    return {"versions": versions(), "commit": git_state().get("commit"), "device": str(device),
            "threads": torch.get_num_threads()}


def rng_state() -> dict:
    """torch's global RNG states (nothing the suite trains draws from them, a plugin's dropout would)."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []
    return {"cpu": torch.get_rng_state(), "cuda": cuda}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["cpu"])
    if state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass(frozen=True)
class Point:
    """A point found on disk: its file and header (``new_header``, with ``live`` and ``step``)."""

    path: Path
    header: dict

    @property
    def step(self) -> int:
        return self.header["step"]

    @property
    def runs(self) -> list[str]:
        """Every run it trains, in order (a group's slots, its ended seeds included)."""
        return self.header["runs"]

    @property
    def live(self) -> list[str]:
        """The runs it continues (sorted): those without a row when it was saved."""
        return self.header["live"]

    @property
    def from_steps(self) -> list[int]:
        """The steps its runs went on from, this point's included."""
        return [*self.header["resumed"], self.step]

    def row(self, run_id: str) -> dict:
        """What a run's row takes from the point: when it started, and the steps it went on from."""
        return {"started_at": self.header["started_at"][run_id], "resumed": {"from_steps": self.from_steps}}

    def mismatch(self, kind: str, configs: list[RunConfig], now: dict) -> str | None:
        """Why the point cannot continue ``configs`` trained as a ``kind`` ("run" or "group") in this
        environment (``environment``), or None when it can."""
        h = self.header
        if h["format"] != FORMAT or h["kind"] != kind:
            return f"it is a {h['kind']}'s point of format {h['format']}, not a {kind}'s of format {FORMAT}"
        if sorted(c.run_id() for c in configs) != h["live"]:
            return f"it continues runs {', '.join(h['live'])}"
        for config in configs:
            key = _first_difference(h["configs"][h["runs"].index(config.run_id())], compared(config))
            if key is not None:
                return f"the config of {config.run_id()} changed since ({key})"
        key = _first_difference(h["environment"], now)
        return None if key is None else f"it was computed by other code or on another machine ({key})"


def _first_difference(before: Any, now: Any, where: str = "") -> str | None:
    """The first dotted key whose value differs, with both values; None when equal."""
    if isinstance(before, dict) and isinstance(now, dict):
        for key in sorted(set(before) | set(now), key=str):
            found = _first_difference(before.get(key), now.get(key), f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
        return None
    return None if before == now else f"{where or 'value'}: {before!r}, now {now!r}"


def read_point(out: str | Path, run_ids: list[str], whole: bool = True) -> tuple[Point | None, str | None]:
    """The point that continues ``run_ids``, read but not yet checked: (point, None), (None, why it
    cannot be read), or (None, None) when there is none. ``whole``: every tensor read too (their
    checksums checked), not only the header. Touches nothing: a caller that holds the runs' locks
    refuses a bad one (``refuse``)."""
    path = point_path(out, run_ids)
    if not path.is_file():
        return None, None
    try:
        return Point(path, torch.load(path, map_location="cpu", weights_only=True, mmap=not whole)[KEY]), None
    except Exception as error:  # truncated, not a checkpoint, not ours: never a crash
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return None, f"it cannot be read ({type(error).__name__}: {message})"


def refuse(out: str | Path, run_ids: list[str], why: str) -> None:
    """Say in one line why the point of ``run_ids`` is not used, and remove it (the runs start afresh
    and write their own). Only for a caller that holds the runs' locks."""
    path = point_path(out, run_ids)
    print(f"note: resume point {path} not used: {why}; {', '.join(sorted(run_ids))} train from step 0",
          file=sys.stderr, flush=True)
    _remove(path)


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:  # a read-only folder: the runs' next point replaces it, or the rows say why not
        pass


def new_header(kind: str, runs: list[str], configs: list[dict], now: dict, started_at: dict[str, str],
               note: dict, resumed: Point | None) -> dict:
    """A point's header but for what each save adds (``live``, ``step``, ``rng``): ``runs`` and their
    ``configs`` (``compared``) in order, ``now`` (``environment``), each run's ``started_at``, the
    ``note`` its rows carry (a group's ``seed_parallel``), and the steps earlier pieces went on from."""
    return {"format": FORMAT, "kind": kind, "runs": runs, "configs": configs, "environment": now,
            "started_at": started_at, "note": note, "resumed": [] if resumed is None else resumed.from_steps}


class ResumePoints(L.Callback):
    """Saves the fit's resume point every ``every_s`` seconds of training (0: never), at the first safe
    step once due; and at once when a run ended since the last one (that point no longer continues
    the runs left, and is removed). ``runs()`` gives the runs without a row, ``ready()`` whether the
    group's seeds allow a point now, ``loggers()`` the loggers flushed first (the Trainer's by
    default), so the logs on disk reach the point. Put it last among the Trainer's callbacks, so the
    others' state is the step's. Once every run has its row, ``discard()`` removes the point.

    A point that cannot be written (a full disk, a callback state that cannot be saved) is said in one
    line; the run goes on without points.
    """

    def __init__(self, out: Path, every_s: float, header: dict, runs: Callable[[], list[str]],
                 ready: Callable[[], bool] = lambda: True, resumed: Point | None = None,
                 loggers: Callable[[], list[Logger]] | None = None) -> None:
        self.out, self.every_s, self.header, self.runs, self.ready = out, every_s, header, runs, ready
        self.loggers = loggers
        self.written: Path | None = resumed.path if resumed is not None else None  # the point on disk
        self.saved_runs: list[str] = resumed.live if resumed is not None else []
        self.soon = False  # a run ended since the last point: save at the next safe step
        self.due = math.inf
        self.rng: dict | None = None  # the point's RNG states, until the train loop starts

    def on_train_start(self, trainer: L.Trainer, pl_module: Any) -> None:
        if self.rng is not None:  # as at the point: the train loader drew from it as it started
            set_rng_state(self.rng)
            self.rng = None
        self.due = time.monotonic() + self.every_s

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self.every_s:
            return
        runs = sorted(self.runs())
        if self.written is not None and runs != self.saved_runs:
            self.discard()
            self.soon = bool(runs)
        if (self.soon or time.monotonic() >= self.due) and runs and self.safe(trainer):
            self.save(trainer, runs)

    def safe(self, trainer: L.Trainer) -> bool:
        """Whether a point now resumes exactly: the step is done, and no eval (nor a stop) follows it,
        which Lightning's restore would skip."""
        step, every = trainer.global_step, trainer.val_check_batch
        evaluates = isinstance(every, int) and step % every == 0
        return not trainer.should_stop and step < (trainer.max_steps or 0) and not evaluates and self.ready()

    def save(self, trainer: L.Trainer, runs: list[str]) -> None:
        path = point_path(self.out, runs)
        for logger in self.loggers() if self.loggers is not None else trainer.loggers:
            try:
                logger.save()
            except Exception:  # the point matters more than the logs: a logger that cannot flush says so at its end
                pass
        try:
            # Lightning's own checkpoint as `save_checkpoint` makes it, written here through a
            # temporary file and a rename (Lightning overwrites the file in place).
            checkpoint = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
            write_atomic(path, lambda f: torch.save(checkpoint, f))
        except Exception as error:
            print(f"note: resume point {path} could not be written ({type(error).__name__}: {error}); "
                  "training goes on without resume points", file=sys.stderr, flush=True)
            self.every_s = 0
            return
        if self.written is not None and self.written != path:
            _remove(self.written)
        self.written, self.saved_runs, self.soon = path, runs, False
        self.due = time.monotonic() + self.every_s

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: Any, checkpoint: dict) -> None:
        checkpoint[KEY] = {**self.header, "live": sorted(self.runs()), "step": trainer.global_step,
                           "rng": rng_state()}

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: Any, checkpoint: dict) -> None:
        self.rng = checkpoint[KEY]["rng"]

    def discard(self) -> None:
        """Remove the point on disk (this fit's latest, or the one it went on from)."""
        if self.written is not None:
            _remove(self.written)
            self.written = None
