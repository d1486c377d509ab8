"""Faults: non-finite numbers refused before anything is made, a failure at each stage after the run
folder exists still leaves the run's row, a full disk named in one line, local workers lost alone
and never left behind."""

import errno
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from torch import nn

from emergence_bench.cli import main
from emergence_bench.config import ConfigError, resolve
from emergence_bench.engine.module import EmergenceModule
from emergence_bench.engine.run import run
from emergence_bench.engine.run_folder import RunFolder, RunLock
from emergence_bench.execution.workers import WorkerLost, Workers
from emergence_bench.mixers.base import TokenMixer
from emergence_bench.registry import register_mixer
from emergence_bench.reporting import leaderboard
from emergence_bench.results import atomic, store


@register_mixer("test_faults_open_ended")
class OpenEnded(TokenMixer):
    """A plugin whose constructor takes **kwargs: its keys pass through unchecked, but for finiteness."""

    def __init__(self, d_model, max_len, layer_idx, **kwargs):
        super().__init__(d_model, max_len, layer_idx)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, ctx):
        return self.proj(x)


# --- non-finite numbers -------------------------------------------------------------------------
@pytest.mark.parametrize("flag, value", [("optim.lr", "nan"), ("optim.lr", "inf"), ("optim.weight_decay", "nan"),
                                         ("optim.betas", "[0.9, .nan]"), ("model.init_scale", "-inf"),
                                         ("callbacks.plateau.frac", "nan"), ("task.sparsity", "1e999")])
def test_a_non_finite_flag_is_refused_before_anything_is_made(flag, value, tmp_path, capsys):
    out = tmp_path / "runs"
    assert main(["run", "--out", str(out), f"--{flag}", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and flag.split(".")[-1] in err, err
    assert not out.exists()


@pytest.mark.filterwarnings("ignore:mixer.gain passes unchecked")
def test_non_finite_numbers_are_refused_in_yaml_plugin_keys_and_sweep_grids(tmp_path, capsys, tiny_config):
    config = tmp_path / "c.yaml"
    config.write_text("optim: {lr: .nan}\n")
    assert main(["run", "--config", str(config), "--out", str(tmp_path / "runs")]) == 2
    assert "optim.lr must be a finite number, got nan" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"mixer.gain must be a finite number, got inf"):
        resolve(tiny_config(mixer={"name": "test_faults_open_ended", "gain": float("inf")}))
    assert resolve(tiny_config(mixer={"name": "test_faults_open_ended", "gain": 2.0})).mixer.params["gain"] == 2.0
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({"name": "s", "base": tiny_config(), "grid": {"optim.lr": [1e-3, float("nan")]}}))
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "out")]) == 2
    assert "optim.lr must be a finite number" in capsys.readouterr().err
    assert not list((tmp_path / "out").iterdir())  # no run folder, nothing trained


# --- a failure at each stage after the folder exists ---------------------------------------------
class Injected(RuntimeError):
    pass


def inject(monkeypatch, stage: str) -> None:
    """Make ``stage`` of a run raise Injected."""
    def fail(*args, **kwargs):
        raise Injected(f"injected at {stage}")

    if stage == "config save":
        monkeypatch.setattr("emergence_bench.engine.run_folder.write_text", fail)
    elif stage == "logger":
        monkeypatch.setattr(RunFolder, "logger", fail)
    elif stage == "first step":
        monkeypatch.setattr(EmergenceModule, "training_step", fail)
    elif stage == "eval":
        monkeypatch.setattr(EmergenceModule, "validation_step", fail)
    elif stage == "columns":
        monkeypatch.setattr("emergence_bench.callbacks.recorder.Recorder.columns", fail)
    elif stage == "result write":  # the first write of the row fails; the failed row saying so is written
        real, calls = store.write_json, []

        def fail_once(path, data):
            calls.append(path)
            if len(calls) == 1:
                fail()
            real(path, data)

        monkeypatch.setattr("emergence_bench.engine.run_folder.write_json", fail_once)


STAGES = ["config save", "logger", "first step", "eval", "columns", "result write"]


@pytest.mark.parametrize("stage", STAGES)
def test_a_failure_at_each_stage_leaves_a_failed_row_the_leaderboard_shows(stage, tmp_path, monkeypatch, tiny_config):
    inject(monkeypatch, stage)
    config = resolve(tiny_config())
    returned = run(config, tmp_path)
    monkeypatch.undo()
    row = json.loads((tmp_path / config.run_id() / "result.json").read_text())
    assert row == returned
    assert row["status"] == "failed" and f"injected at {stage}" in row["error"], row["error"]
    assert row["run_id"] == config.run_id() and row["config"] == config.to_dict()
    RunLock(tmp_path, config.run_id()).release()  # the lock was let go
    table, markdown = leaderboard.write(tmp_path)
    assert table["failed"].sum() == 1 and "1 failed" in markdown


def test_a_non_finite_value_in_a_row_is_written_as_null_naming_it(tmp_path, monkeypatch, tiny_config):
    from emergence_bench.callbacks.recorder import Recorder

    columns = Recorder.columns

    def with_nan(self, trainer, module):
        found = columns(self, trainer, module)
        found["metrics"]["final_eval_loss"] = float("nan")
        found["timing"]["steps_per_second"] = float("inf")
        return found

    monkeypatch.setattr(Recorder, "columns", with_nan)
    config = resolve(tiny_config())
    returned = run(config, tmp_path)
    row = json.loads((tmp_path / config.run_id() / "result.json").read_text())
    assert row == returned and row["status"] == "ok"
    assert row["metrics"]["final_eval_loss"] is None and row["timing"]["steps_per_second"] is None
    assert row["non_finite"] == ["timing.steps_per_second: inf", "metrics.final_eval_loss: nan"]


# --- a full disk --------------------------------------------------------------------------------
class HalfWritten:
    """A file that takes half of what is written to it, then fails as a full disk (or a folder
    without permission) does."""

    def __init__(self, file, code: int):
        self.file, self.code = file, code

    def write(self, data: bytes) -> None:
        self.file.write(data[: len(data) // 2])
        self.file.flush()
        raise OSError(self.code, os.strerror(self.code))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES])
def test_a_full_disk_mid_sweep_is_named_in_one_line_and_leaves_no_half_file(code, tmp_path, monkeypatch, capsys,
                                                                             tiny_config):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({"name": "full", "base": tiny_config(), "grid": {"seed": [0, 1, 2]}}))
    rows = []

    def open_on_a_filling_disk(path, mode="r", *args, **kwargs):
        file = open(path, mode, *args, **kwargs)
        if Path(path).name.startswith(".result.json."):
            rows.append(path)
            if len(rows) == 2:  # the second run's row
                return HalfWritten(file, code)
        return file

    monkeypatch.setattr(atomic, "open", open_on_a_filling_disk, raising=False)
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert f"({errno.errorcode[code]})" in errors[0] and "result.json" in errors[0], errors[0]
    assert not list(out.rglob("*.tmp"))  # the half-written file is gone
    rows = [json.loads(p.read_text()) for p in out.glob("*/result.json")]
    assert [r["status"] for r in rows] == ["ok"]  # the first run's row, whole; the sweep stopped
    monkeypatch.undo()
    assert main(["sweep", str(sweep), "--out", str(out)]) == 0  # space again: it resumes
    assert "1 already finished, 2 to run" in capsys.readouterr().err


def test_a_read_only_filesystem_is_reported_even_where_the_cleanup_fails_too(tmp_path, monkeypatch):
    """On a filesystem gone read-only the temporary file cannot be removed either: the write's own
    error (EROFS) is what is reported, as ResultsUnwritable, not the cleanup's."""
    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "fsync", refuse)
    monkeypatch.setattr(Path, "unlink", refuse)
    with pytest.raises(atomic.ResultsUnwritable, match=r"\(EROFS\)"):
        store.write_text(tmp_path / "x.json", "{}")


def test_a_disk_error_crosses_from_a_worker_intact():
    error = atomic.unwritable("/r/x/result.json", OSError(errno.ENOSPC, "No space left on device"))
    back = pickle.loads(pickle.dumps(error))
    assert isinstance(back, atomic.ResultsUnwritable) and isinstance(back, ValueError)
    assert back.errno == errno.ENOSPC and str(back) == str(error) and "(ENOSPC)" in str(back)
    assert not atomic.is_disk_error(OSError(errno.ENOENT, "missing"))


# --- local workers ------------------------------------------------------------------------------
def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_worker_lost_loses_its_own_job_only_and_stop_ends_every_worker():
    pool = Workers(2, os.getpid)
    jobs = [(os.getpid, ()), (signal.raise_signal, (signal.SIGKILL,)), (int, ("x",)), (os.getpid, ()),
            (os._exit, (3,)), (os.getpid, ())]
    got = dict(pool.results(jobs))
    pids = {got[i] for i in (0, 3, 5)}
    assert all(isinstance(p, int) and p != os.getpid() for p in pids)
    assert isinstance(got[1], WorkerLost) and "killed by SIGKILL" in str(got[1])
    assert isinstance(got[2], ValueError)
    assert isinstance(got[4], WorkerLost) and "exited with code 3" in str(got[4])
    workers = [w.process.pid for w in pool.idle]
    pool.stop()
    assert not any(alive(pid) for pid in workers + list(pids))


DRIVER = """
import os, sys, time
from emergence_bench.execution.workers import Workers
pool = Workers(2, os.getpid)
results = pool.results([(time.sleep, (120,)), (time.sleep, (120,))])
print(" ".join(str(w.process.pid) for w in pool.idle), flush=True)
next(results)
"""


def test_workers_die_with_a_driver_killed_by_sigkill():
    driver = subprocess.Popen([sys.executable, "-c", textwrap.dedent(DRIVER)], stdout=subprocess.PIPE, text=True)
    workers = [int(pid) for pid in driver.stdout.readline().split()]
    assert len(workers) == 2 and all(alive(pid) for pid in workers)
    driver.kill()
    driver.wait()
    deadline = time.time() + 10
    while any(alive(pid) for pid in workers) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in workers)


def test_jobs_appended_while_the_pool_runs_are_run_too():
    pool = Workers(2, os.getpid)
    jobs = [(abs, (-1,))]
    got = []
    try:
        for index, result in pool.results(jobs):
            got.append(result)
            if len(jobs) < 4:  # each result unlocks one more job
                jobs.append((abs, (-(len(jobs) + 1),)))
    finally:
        pool.stop()
    assert sorted(got) == [1, 2, 3, 4]
