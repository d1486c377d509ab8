"""The thread policy (threads.choose_threads): chosen by model size and cores, applied in a run,
recorded in every row, overridden by --threads, checked against the cores, and left out of run ids."""

import json

import lightning as L
import pytest
import torch
import yaml

from emergence_bench.cli import main
from emergence_bench.config import ConfigError, hashed_config, resolve
from emergence_bench.engine.run import apply_threads, plan, run
from emergence_bench.execution import ray_executor, sweep_spec
from emergence_bench.execution import sweep as sweeps
from emergence_bench.machine import threads as cfg
from emergence_bench.machine.threads import SMALL_STEP_FLOPS, choose_threads, step_flops
from emergence_bench.registry import register_callback


@register_callback("test_thread_probe")
class ThreadProbe(L.Callback):
    """Reports the intra-op threads torch has while the run trains."""

    def __init__(self, task):
        self.seen = set()

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.seen.add(torch.get_num_threads())

    def report(self) -> dict:
        return {"seen": sorted(self.seen)}


@pytest.fixture
def probed(tiny_config):
    """probed(**sections) -> a tiny config with the thread probe callback."""
    return lambda **sections: tiny_config(callbacks={"test_thread_probe": {}}, **sections)


@pytest.fixture
def four_cores(monkeypatch):
    """As if this process had 4 cores and no OMP_NUM_THREADS (the policy, not this machine)."""
    monkeypatch.setattr(cfg, "available_cpus", lambda: 4)
    monkeypatch.setattr(sweeps, "available_cpus", lambda: 4)
    monkeypatch.setattr(cfg, "_cpu_share", None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


# --- the choice -------------------------------------------------------------------------------
def test_auto_gives_small_models_one_thread_and_large_ones_the_share(four_cores):
    small, large = SMALL_STEP_FLOPS / 10, SMALL_STEP_FLOPS * 10
    assert choose_threads("auto", small, cpus=4) == 1
    assert choose_threads("auto", large, cpus=4) == 4
    assert choose_threads("auto", large) == 4  # this process's share: every core by default
    for workers, share in [(1, 4), (2, 2), (3, 1), (4, 1), (8, 1)]:
        assert sweeps.worker_share(workers) == share
        assert choose_threads("auto", large, sweeps.worker_share(workers)) == share
        assert choose_threads("auto", small, sweeps.worker_share(workers)) == 1
    assert choose_threads("auto", large, cpus=4, env={"OMP_NUM_THREADS": "2"}) == 2  # the user's limit
    assert choose_threads(3, small, cpus=4) == 3  # an explicit count is used as given


def test_size_estimate_puts_quick_below_the_threshold_and_a_wide_model_above(four_cores):
    quick = plan(sweep_spec.load_sweep("quick").base)
    wide = plan({**sweep_spec.load_sweep("quick").base, "model": {"d_model": 512, "n_layers": 2}})
    assert apply_threads(quick) == 1
    assert apply_threads(wide) == 4 and torch.get_num_threads() == 4
    assert apply_threads(quick, seeds=64) == 4  # 64 seeds trained together are one large step
    assert step_flops(51_330, 128, 23) < SMALL_STEP_FLOPS  # the quick model's step, ~0.9 GFLOP


# --- applied and recorded ---------------------------------------------------------------------
def test_the_threads_a_run_trains_with_are_the_policy_s_and_are_recorded(tmp_path, four_cores, probed):
    torch.set_num_threads(3)
    row = run(probed(), tmp_path)  # auto, a tiny model: 1 thread whatever was set before
    assert row["status"] == "ok" and row["test_thread_probe"]["seen"] == [1] and row["threads"] == 1
    row = run(probed(trainer={"threads": 2}), tmp_path)
    assert row["test_thread_probe"]["seen"] == [2] and row["threads"] == 2
    saved = json.loads((tmp_path / row["run_id"] / "result.json").read_text())
    assert saved["threads"] == 2 and saved["config"]["trainer"]["threads"] == 2


@pytest.mark.slow
def test_a_sweep_worker_s_share_bounds_auto(tmp_path, four_cores, monkeypatch, probed):
    monkeypatch.setattr(cfg, "SMALL_STEP_FLOPS", 0.0)  # the tiny model counts as large here
    cfg.set_cpu_share(sweeps.worker_share(2))  # what _init_worker does in each of 2 workers
    row = run(probed(), tmp_path)
    assert row["threads"] == 2 and row["test_thread_probe"]["seen"] == [2]
    with pytest.raises(ConfigError, match="trainer.threads=3"):  # more than the worker's share
        run(probed(trainer={"threads": 3}), tmp_path)


@pytest.mark.slow
def test_a_two_worker_sweep_keeps_workers_times_threads_within_the_cores(tmp_path, tiny_config):
    sweep = sweep_spec.Sweep("t", tiny_config(trainer={"max_steps": 5, "eval_every": 5}), {"seed": [0, 1]})
    counts = sweeps.run_sweep(sweep, tmp_path, workers=2, stream=open(tmp_path / "log", "w"))
    assert counts["ok"] == 2
    rows = [json.loads(p.read_text()) for p in tmp_path.glob("*/result.json")]
    assert len(rows) == 2 and all(row["threads"] * 2 <= max(2, cfg.available_cpus()) for row in rows)


# --- the CLI flag -----------------------------------------------------------------------------
@pytest.mark.slow
def test_threads_flag_overrides_the_config_for_run_and_sweep(tmp_path, capsys, tiny_config):
    config_file = tmp_path / "c.yaml"
    config_file.write_text(yaml.safe_dump(tiny_config(trainer={"threads": 1})))
    assert main(["run", "--config", str(config_file), "--threads", "2", "--out", str(tmp_path / "r")]) == 0
    assert "threads 2" in capsys.readouterr().out
    (row,) = [json.loads(p.read_text()) for p in (tmp_path / "r").glob("*/result.json")]
    assert row["threads"] == 2 and row["config"]["trainer"]["threads"] == 2
    assert row["run_id"] == resolve(tiny_config()).run_id()  # the same run as with any other thread count

    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text(yaml.safe_dump({"name": "s", "base": tiny_config(trainer={"max_steps": 5, "threads": 2}),
                                          "grid": {"seed": [0]}}))
    assert main(["sweep", str(sweep_file), "--threads", "1", "--out", str(tmp_path / "s")]) == 0
    (row,) = [json.loads(p.read_text()) for p in (tmp_path / "s").glob("*/result.json")]
    assert row["threads"] == 1 and row["config"]["trainer"]["threads"] == 1


# --- invalid values ---------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "many"])
def test_invalid_thread_counts_are_rejected_naming_the_key(bad, tiny_config):
    with pytest.raises(ConfigError, match="trainer.threads"):
        resolve(tiny_config(trainer={"threads": bad}))


def test_more_threads_than_cores_is_rejected_before_anything_runs(tmp_path, four_cores, capsys, tiny_config):
    with pytest.raises(ConfigError, match="trainer.threads=5 is more than the 4 core"):
        choose_threads(5, 0.0)
    with pytest.raises(ConfigError, match="trainer.threads=5"):
        run(tiny_config(trainer={"threads": 5}), tmp_path / "run")
    assert not (tmp_path / "run").exists()
    assert main(["run", "--threads", "5", "--out", str(tmp_path / "cli")]) == 2
    assert "trainer.threads=5" in capsys.readouterr().err and not (tmp_path / "cli").exists()
    sweep = sweep_spec.Sweep("t", tiny_config(trainer={"threads": 3}), {"seed": [0, 1]})
    with pytest.raises(ConfigError, match=r"trainer.threads=3 with 2 worker\(s\) needs 6 cores"):
        sweeps.run_sweep(sweep, tmp_path / "sweep", workers=2)
    assert not list((tmp_path / "sweep").glob("*/result.json"))


def test_ray_tasks_reserve_the_cpus_their_threads_use(tiny_config):
    configs = [resolve(tiny_config(trainer={"threads": 2}))]
    ray_executor.check_threads_fit(configs, num_cpus=2)
    ray_executor.check_threads_fit([resolve(tiny_config())], num_cpus=0.5)  # auto fits any task
    with pytest.raises(ConfigError, match="trainer.threads=2 but each Ray task reserves --num-cpus 1"):
        ray_executor.check_threads_fit(configs, num_cpus=1)
    assert ray_executor.task_share(0.5) == 1 and ray_executor.task_share(3.0) == 3


# --- run ids ----------------------------------------------------------------------------------
def test_threads_leave_run_ids_as_they_were(tiny_config):
    # The ids these configs had before trainer.threads existed: old results still resume.
    assert resolve({}).run_id() == "linear_map-transformer-seed0-1b9f2f82cf"
    assert resolve(tiny_config()).run_id() == "linear_map-transformer-seed0-710f8e6071"
    assert resolve(tiny_config(trainer={"threads": 2})).run_id() == resolve(tiny_config()).run_id()
    assert resolve(tiny_config(trainer={"max_steps": 21})).run_id() != resolve(tiny_config()).run_id()


def test_hashed_config_drops_only_the_unhashed_keys(tiny_config):
    data = resolve(tiny_config(trainer={"threads": 2})).to_dict()
    kept = hashed_config(data)
    assert "threads" not in kept["trainer"] and data["trainer"]["threads"] == 2  # a copy
    # how fast, where it logs and how often it saves a resume point, not what it computes
    unhashed = ("threads", "logger", "keep_freed_memory", "resume_every_s")
    added = ("batch_order",)  # added later, left out at the value earlier runs computed with ("drawn")
    assert data["trainer"]["batch_order"] == "drawn"
    assert {k: v for k, v in data["trainer"].items() if k not in unhashed + added} == kept["trainer"]
    assert hashed_config({"seed": 1}) == {"seed": 1}  # an old result's config without the section
