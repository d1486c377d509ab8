"""Resume points (emergence_bench.engine.resume_point): a group or a run stopped after a point goes on
from it to the very rows it would have written in one piece; a point that does not fit is refused in
one line; with ``trainer.resume_every_s: 0`` none is written, and saving them changes no number."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from emergence_bench.callbacks.checkpoints import saved_checkpoints
from emergence_bench.config import resolve
from emergence_bench.engine import resume_point
from emergence_bench.engine.resume_point import ResumePoints, point_path
from emergence_bench.engine.run import run
from emergence_bench.engine.run_folder import record_lost
from emergence_bench.engine.seed_parallel import run_seed_parallel
from emergence_bench.registry import register_callback
from emergence_bench.results.store import RESUME_DIR, is_finished

# Thresholds a tiny run crosses, so the plateau and emergence sections hold steps, not censoring.
MEASURED = {"plateau": {"threshold": 0.685, "window": 5}, "emergence": {"threshold": 0.55}}
EVERY_STEP = 1e-9  # trainer.resume_every_s: a point at every step where one is safe
SECONDS = {"train_seconds", "eval_seconds", "steps_per_second"}  # what two pieces sum, or measure anew


@register_callback("test_resume_stop")
class StopAt(L.Callback):
    """Ends its seed after a step drawn from the seed (built after ``seed_everything(seed)``), so the
    seeds of a group end at different steps; nothing to save: it draws the same step again."""

    def __init__(self, task):
        self.at = int(torch.randint(6, 30, ()))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.at:
            trainer.should_stop = True


class Killed(BaseException):
    """The process dying: no row is written (an Exception would fail the runs with rows)."""


@pytest.fixture
def kill_at(monkeypatch):
    """``kill_at(when)``: the next fit dies right after the first resume point it writes for which
    ``when(step, live run ids)`` holds."""
    save = ResumePoints.save

    def arm(when):
        def saving(self, trainer, runs):
            save(self, trainer, runs)
            if when(trainer.global_step, runs):
                monkeypatch.setattr(ResumePoints, "save", save)
                raise Killed(f"killed after the point of step {trainer.global_step}")
        monkeypatch.setattr(ResumePoints, "save", saving)

    return arm


def killed(train):
    """Run ``train()``, which must die at its armed point; then let go of its runs' locks, as the
    kernel does for a process that died."""
    with pytest.raises(Killed):
        train()
    gc.collect()


def config(tiny_config, seed: int = 0, **sections) -> dict:
    trainer = {"max_steps": 40, "eval_every": 4, "log_every": 3, "resume_every_s": EVERY_STEP,
               **sections.pop("trainer", {})}
    return tiny_config(seed=seed, callbacks={**MEASURED, "attention_probe": {}, **sections.pop("callbacks", {})},
                       trainer=trainer, checkpoints={"every": 5}, **sections)


def assert_same_runs(resumed: Path, straight: Path, run_ids: list[str]) -> None:
    """Each run's row under ``resumed`` is the one under ``straight``, but for the seconds it took,
    when it started and the ``resumed`` note; its checkpoints and attention maps are the same bits."""
    for run_id in run_ids:
        a, b = (json.loads((folder / run_id / "result.json").read_text()) for folder in (resumed, straight))
        assert set(a) == set(b) | {"resumed"}, run_id
        assert a["resumed"]["from_steps"] and all(s > 0 for s in a["resumed"]["from_steps"])
        for key in set(b) - {"timing", "started_at"}:
            assert a[key] == b[key], f"{run_id}: {key}"
        assert {k: v for k, v in a["timing"].items() if k not in SECONDS} == \
               {k: v for k, v in b["timing"].items() if k not in SECONDS}
        mine, theirs = saved_checkpoints(resumed / run_id), saved_checkpoints(straight / run_id)
        assert list(mine) == list(theirs) and mine
        for step in mine:
            x, y = torch.load(mine[step])["model"], torch.load(theirs[step])["model"]
            assert all(torch.equal(x[k], y[k]) for k in y), f"{run_id}: checkpoint {step}"
        x, y = (torch.load(folder / run_id / "attention_maps.pt") for folder in (resumed, straight))
        assert [m["step"] for m in x["moments"]] == [m["step"] for m in y["moments"]]
        for m, n in zip(x["moments"] + [x], y["moments"] + [y]):
            assert all(torch.equal(p, q) for p, q in zip(m["maps"], n["maps"])), f"{run_id}: attention maps"


def points(out: Path) -> list[Path]:
    return sorted((out / RESUME_DIR).glob("*")) if (out / RESUME_DIR).is_dir() else []


@pytest.mark.parametrize("when", ["at a checkpoint's step", "after a seed ended"])
def test_a_group_stopped_after_a_point_goes_on_to_the_same_rows(when, tmp_path, tiny_config, kill_at):
    configs = [config(tiny_config, seed, callbacks={"test_resume_stop": {}}) for seed in range(4)]
    run_ids = [resolve(c).run_id() for c in configs]
    straight = run_seed_parallel(configs, tmp_path / "straight")
    assert len({r["timing"]["steps"] for r in straight}) > 1  # the seeds end at different steps
    assert not points(tmp_path / "straight")  # each removed once its runs had rows
    kill_at((lambda step, live: step == 5) if when == "at a checkpoint's step" else (lambda step, live: len(live) < 4))
    killed(lambda: run_seed_parallel(configs, tmp_path / "resumed"))
    for c in configs:  # what a sweep's driver writes for the runs of a worker that died (WorkerLost)
        record_lost(resolve(c), tmp_path / "resumed", "WorkerLost: the worker died mid-run")
    [point] = points(tmp_path / "resumed")
    pending = [c for c, run_id in zip(configs, run_ids) if not is_finished(tmp_path / "resumed" / run_id)]
    assert point == point_path(tmp_path / "resumed", [resolve(c).run_id() for c in pending])
    assert len(pending) == (4 if when == "at a checkpoint's step" else 3)
    rows = run_seed_parallel(pending, tmp_path / "resumed")  # as a rerun sweep gives it its unfinished runs
    assert not points(tmp_path / "resumed")
    assert [r["run_id"] for r in rows] == [resolve(c).run_id() for c in pending]
    assert_same_runs(tmp_path / "resumed", tmp_path / "straight", [resolve(c).run_id() for c in pending])


def test_a_run_alone_stopped_after_a_point_goes_on_to_the_same_row(tmp_path, tiny_config, kill_at):
    c = config(tiny_config)
    run(c, tmp_path / "straight")
    kill_at(lambda step, live: step == 13)
    killed(lambda: run(c, tmp_path / "resumed"))
    assert len(points(tmp_path / "resumed")) == 1
    row = run(c, tmp_path / "resumed")
    assert row["resumed"] == {"from_steps": [13]} and not points(tmp_path / "resumed")
    assert_same_runs(tmp_path / "resumed", tmp_path / "straight", [row["run_id"]])


def test_points_change_no_number_and_with_0_none_is_written(tmp_path, tiny_config, monkeypatch):
    saved = []
    save = ResumePoints.save

    def saving(self, trainer, runs):
        saved.append(runs)
        save(self, trainer, runs)

    monkeypatch.setattr(ResumePoints, "save", saving)
    configs = {every: [config(tiny_config, seed, trainer={"resume_every_s": every}) for seed in (0, 1)]
               for every in (0, EVERY_STEP)}

    def both(every: float, where: str) -> list[dict]:  # a group, and its first seed alone
        return (run_seed_parallel(configs[every], tmp_path / where / "group")
                + [run(configs[every][0], tmp_path / where / "alone")])

    off = both(0, "off")
    assert not saved and not list((tmp_path / "off").glob(f"*/{RESUME_DIR}"))
    on = both(EVERY_STEP, "on")
    assert len(saved) > 40  # a point at nearly every step, then removed
    for a, b in zip(on, off):
        assert a["run_id"] == b["run_id"]  # resume_every_s is not in the run id
        for key in set(a) - {"timing", "started_at", "config"}:
            assert a[key] == b[key], key
        assert a["config"]["trainer"].pop("resume_every_s") == EVERY_STEP
        assert b["config"]["trainer"].pop("resume_every_s") == 0
        assert a["config"] == b["config"]


def test_a_point_of_another_config_or_code_is_refused_and_the_group_starts_afresh(tmp_path, tiny_config, kill_at,
                                                                                  capfd, monkeypatch):
    configs = [config(tiny_config, seed) for seed in (0, 1)]
    kill_at(lambda step, live: step == 9)
    killed(lambda: run_seed_parallel(configs, tmp_path / "cut"))
    [point] = points(tmp_path / "cut")
    # the logger is not in the run id, so the same runs look for this point: it is refused
    changed = [{**c, "trainer": {**c["trainer"], "logger": "csv"}} for c in configs]
    assert [resolve(c).run_id() for c in changed] == [resolve(c).run_id() for c in configs]
    capfd.readouterr()
    rows = run_seed_parallel(changed, tmp_path / "cut")
    lines = [line for line in capfd.readouterr().err.splitlines() if "resume point" in line]
    assert lines == [f"note: resume point {point} not used: the config of {rows[0]['run_id']} changed since "
                     "(trainer.logger: 'tensorboard', now 'csv'); "
                     f"{', '.join(sorted(r['run_id'] for r in rows))} train from step 0"]
    assert "resumed" not in rows[0] and not points(tmp_path / "cut")
    assert [r["metrics"] for r in rows] == [r["metrics"] for r in run_seed_parallel(changed, tmp_path / "fresh")]
    # another version of the code: the same
    kill_at(lambda step, live: step == 9)
    killed(lambda: run(configs[0], tmp_path / "cut2"))
    monkeypatch.setattr(resume_point, "versions", lambda: {"torch": "0.0"})
    row = run(configs[0], tmp_path / "cut2")
    assert "resumed" not in row and "computed by other code or on another machine (versions." in capfd.readouterr().err


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "not ours"])
def test_a_damaged_point_is_refused_in_one_line_never_a_crash(damage, tmp_path, tiny_config, kill_at, capfd):
    configs = [config(tiny_config, seed) for seed in (0, 1)]
    kill_at(lambda step, live: step == 9)
    killed(lambda: run_seed_parallel(configs, tmp_path))
    [point] = points(tmp_path)
    data = point.read_bytes()
    point.write_bytes({"truncated": data[: len(data) // 2], "garbage": os.urandom(len(data)), "empty": b"",
                       "not ours": b""}[damage])
    if damage == "not ours":  # a checkpoint, but without the header
        torch.save({"state_dict": {}}, point)
    capfd.readouterr()
    rows = run_seed_parallel(configs, tmp_path)
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if "resume point" in line]
    assert len(lines) == 1 and lines[0].startswith(f"note: resume point {point} not used: it cannot be read (")
    assert "Traceback" not in err and [r["status"] for r in rows] == ["ok", "ok"]
    assert all("resumed" not in r for r in rows) and not points(tmp_path)


def point_step(out: Path) -> int | None:
    """The step of the point under ``out`` (None: none there, or one being replaced as it is read)."""
    try:
        [path] = points(out)
        return torch.load(path, weights_only=True, mmap=True)[resume_point.KEY]["step"]
    except (ValueError, OSError, RuntimeError, KeyError):
        return None


@pytest.mark.slow
def test_a_sweep_killed_mid_group_goes_on_from_its_point(tmp_path, cli, cli_executable, tiny_config):
    """The real thing: a seed-parallel sweep SIGKILLed (its process group) once a point past step 60
    is on disk; the rerun goes on from it to the rows of a sweep never stopped (seeds emerge, and end,
    from step 180 on, about 4 s of training)."""
    base = tiny_config(task={"name": "linear_map", "state_size": 8, "sparsity": 2, "batch_size": 32},
                       callbacks={**MEASURED, "emergence": {"stop": True}},
                       trainer={"max_steps": 600, "eval_every": 20, "resume_every_s": 0.2})
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text(yaml.safe_dump({"name": "resume", "base": base, "grid": {"seed": [0, 1, 2, 3]}}))
    args = [sweep_file, "--seed-parallel", "4", "--batching", "always", "--workers", "1"]
    straight = cli("sweep", *args, "--out", tmp_path / "straight")
    assert straight.returncode == 0, straight.stderr
    out = tmp_path / "resumed"
    process = subprocess.Popen([cli_executable, "sweep", *map(str, args), "--out", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.time() + 300
    while (point_step(out) or 0) < 60 and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    step = point_step(out)
    assert step is not None and step >= 60
    again = cli("sweep", *args, "--out", out)
    assert again.returncode == 0, again.stderr
    assert not points(out)
    for expected in (json.loads(p.read_text()) for p in (tmp_path / "straight").glob("*/result.json")):
        row = json.loads((out / expected["run_id"] / "result.json").read_text())
        assert row["resumed"]["from_steps"] == [step]
        for key in set(expected) - {"timing", "started_at", "provenance"}:
            assert row[key] == expected[key], key
