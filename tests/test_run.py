import json

import pytest
import torch
import yaml

from emergence_bench.engine.run import run
from emergence_bench.execution.sweep import run_sweep
from emergence_bench.execution.sweep_spec import Sweep
from emergence_bench.reporting import leaderboard
from emergence_bench.results.store import load
from emergence_bench.tasks.linear_map import LinearMap


def test_result_schema_and_files(tmp_path, tiny_config):
    record = run(tiny_config(), tmp_path)
    run_dir = tmp_path / record["run_id"]
    assert json.loads((run_dir / "result.json").read_text()) == record
    assert yaml.safe_load((run_dir / "config.yaml").read_text()) == record["config"]
    assert any((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert record["status"] == "ok" and record["error"] is None
    assert record["backend"] == "torch" and record["device"] == "cpu"
    assert record["versions"]["torch"] and record["versions"]["lightning"]
    assert record["timing"]["steps"] == 20 and record["timing"]["steps_per_second"] > 0
    assert set(record["metrics"]) >= {"final_train_loss", "final_eval_loss", "final_eval_accuracy"}
    assert set(record["plateau"]) >= {"threshold", "end_step", "censored", "spans"}
    assert set(record["emergence"]) >= {"threshold", "step", "censored", "per_position"}
    assert [s for s, _ in record["emergence"]["history"]] == [10, 20]
    assert len(record["emergence"]["per_position"]) == 4  # one per output cell of S=4
    assert len(record["plateau"]) and record["plateau"]["budget"] == 20
    assert [s for s, _ in record["curves"]["train_loss"]] == [9, 19]  # mean of every log_every=10 steps
    assert [row[0] for row in record["curves"]["eval"]] == [10, 20]
    maps = torch.load(run_dir / "attention_maps.pt")
    assert maps["layers"] == [0] and maps["maps"][0].shape == (2, 7, 7) and maps["step"] == 20
    assert torch.equal(maps["ground_truth"], LinearMap(4, 2).ground_truth_attention())


def test_same_seed_same_numbers_other_seed_other_numbers(tmp_path, tiny_config):
    a = run(tiny_config(), tmp_path / "a")
    b = run(tiny_config(), tmp_path / "b")
    c = run(tiny_config(seed=1), tmp_path / "c")
    for key in ("metrics", "plateau", "emergence"):
        assert a[key] == b[key]
    assert a["metrics"] != c["metrics"]


def test_a_run_builds_its_task_once_and_starts_from_the_seeds_weights(tmp_path, tiny_config, monkeypatch):
    import lightning as L

    from emergence_bench.engine import run as runs

    built, first_weights = [], []
    build_task, build_model = runs.build_task, runs.build_model

    def counted_task(config):
        built.append(config.task.name)
        return build_task(config)

    def captured_model(config, task):
        model = build_model(config, task)
        if not any(p.is_meta for p in model.parameters()):  # the plan sizes it on the meta device first
            first_weights.append({k: v.clone() for k, v in model.state_dict().items()})
        return model

    monkeypatch.setattr(runs, "build_task", counted_task)
    monkeypatch.setattr(runs, "build_model", captured_model)
    run(tiny_config(seed=3), tmp_path)
    assert built == ["linear_map"] and len(first_weights) == 1
    # The weights a run starts from are those of seed, then task, then model, as they always were.
    config = runs.plan(tiny_config(seed=3)).config
    L.seed_everything(3, verbose=False)
    expected = build_model(config, build_task(config)).state_dict()
    assert all(torch.equal(expected[k], v) for k, v in first_weights[0].items())


@pytest.mark.parametrize("extra", [[], ["--seed-parallel", "2", "--batching", "always"]])
def test_the_run_command_resolves_and_plans_each_config_once(extra, tmp_path, tiny_config, monkeypatch):
    """docs/design.md: a run is checked and sized once. `run` resolves its config once and plans it
    once (one task built); with --seed-parallel K, each of the K seeds' configs is resolved and planned
    once, and the group and its seeds train on those plans."""
    from emergence_bench import config as configs
    from emergence_bench.cli import main
    from emergence_bench.engine import run as runs

    resolved, built = [], []

    def counted(function, calls):
        def wrapper(*args, **kwargs):
            calls.append(args)
            return function(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(configs, "resolve", counted(configs.resolve, resolved))  # the command's
    monkeypatch.setattr(runs, "resolve", counted(runs.resolve, resolved))  # the plan's
    monkeypatch.setattr(runs, "build_task", counted(runs.build_task, built))
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(tiny_config()))
    assert main(["run", "--config", str(path), "--out", str(tmp_path / "out"), *extra]) == 0
    seeds = 2 if extra else 1
    assert len(resolved) == len(built) == seeds
    assert len(list((tmp_path / "out").glob("*/result.json"))) == seeds


@pytest.mark.parametrize("log_every, stopped_at", [(10, 9), (1, 5), (4, 7)])
def test_nan_loss_is_recorded_as_diverged_naming_its_step(log_every, stopped_at, tmp_path, tiny_config):
    """Losses are read back every log_every steps: the error names the step whose loss became NaN
    (step 5), and the run ends at the first read that sees it."""
    record = run(tiny_config(mixer={"name": "test_nan_after", "steps": 5}, trainer={"log_every": log_every}), tmp_path)
    assert record["status"] == "diverged" and record["error"] == "training loss became nan at step 5"
    assert record["timing"]["steps"] == stopped_at
    assert json.loads((tmp_path / record["run_id"] / "result.json").read_text())["status"] == "diverged"


def test_sweep_records_failures_and_continues_then_builds_a_leaderboard(tmp_path, tiny_config):
    sweep = Sweep("t", base=tiny_config(), grid={
        "seed": [0, 1], "mixer": [{"name": "transformer", "n_heads": 2, "head_dim": 4}, {"name": "test_broken"}]})
    counts = run_sweep(sweep, tmp_path)
    assert counts.pop("wall_seconds") > 0
    assert counts == {"total": 4, "skipped": 0, "ok": 2, "diverged": 0, "failed": 2, "busy": 0}
    frame = load(tmp_path)
    assert len(frame) == 4 and set(frame["status"]) == {"ok", "failed"}
    assert frame[frame.status == "failed"]["error"].str.contains("broken on purpose").all()
    # Failed runs are retried on rerun, finished ones are not.
    assert run_sweep(sweep, tmp_path)["skipped"] == 2
    table, markdown = leaderboard.write(tmp_path)
    assert len(table) == 2
    broken = table[table.mixer.str.startswith("test_broken")].iloc[0]
    assert broken["failed"] == 2 and broken["seeds"] == 2
    good = table[table.mixer.str.startswith("transformer")].iloc[0]
    assert good["seeds"] == 2 and good["failed"] == 0
    assert (tmp_path / "leaderboard.md").read_text() == markdown
    assert (tmp_path / "leaderboard.csv").read_text().startswith("task,mixer")
    assert "2 failed" in markdown


def test_checkpoints_on_a_schedule(tmp_path, tiny_config):
    from emergence_bench.callbacks.checkpoints import saved_checkpoints, schedule

    assert schedule(20, every=8, log_spaced=True) == [0, 1, 2, 4, 8, 16, 20]
    assert schedule(20) == [0, 20]
    record = run(tiny_config(checkpoints={"every": 8, "log_spaced": True}), tmp_path)
    saved = saved_checkpoints(tmp_path / record["run_id"])
    assert list(saved) == [0, 1, 2, 4, 8, 16, 20]
    first, last = torch.load(saved[0]), torch.load(saved[20])
    assert first["step"] == 0 and last["step"] == 20
    key = "head.weight"
    assert not torch.equal(first["model"][key], last["model"][key])
    assert saved_checkpoints(tmp_path / run(tiny_config(seed=1), tmp_path)["run_id"]) == {}


def test_parameters_marked_no_weight_decay_are_not_decayed():
    from emergence_bench.config import OptimConfig
    from emergence_bench.engine.model import SequenceModel
    from emergence_bench.engine.module import EmergenceModule

    task = LinearMap(4, 2)
    model = SequenceModel(2, task.seq_len, {"name": "mamba", "d_state": 4}, d_model=16)
    optimizer = EmergenceModule(model, task, OptimConfig(weight_decay=0.1), 10).configure_optimizers()["optimizer"]
    decayed, kept = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and kept["weight_decay"] == 0.0
    a_log = model.blocks[0].mixer.A_log
    assert any(p is a_log for p in kept["params"]) and not any(p is a_log for p in decayed["params"])
    assert len(decayed["params"]) + len(kept["params"]) == len(list(model.parameters()))
