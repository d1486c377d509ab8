import json

import pytest
import yaml

from emergence_bench.commands.sweep import _mixer_keys_on_axis
from emergence_bench.config import ConfigError
from emergence_bench.execution import tuning
from emergence_bench.execution.sweep import run_sweep
from emergence_bench.execution.sweep_spec import Group, Sweep, load_sweep, merge, presets


def test_merge_deep_merges_and_replaces_a_renamed_task():
    base = {"task": {"name": "linear_map", "state_size": 8}, "trainer": {"max_steps": 10, "eval_every": 5}}
    assert merge(base, {"trainer": {"max_steps": 20}}) == {
        "task": {"name": "linear_map", "state_size": 8}, "trainer": {"max_steps": 20, "eval_every": 5}}
    assert merge(base, {"task": {"name": "cellular_automata", "colors": 3}})["task"] == {
        "name": "cellular_automata", "colors": 3}
    assert merge(base, {"task": {"sparsity": 2}})["task"] == {"name": "linear_map", "state_size": 8, "sparsity": 2}
    assert base["trainer"]["max_steps"] == 10  # the base is not modified


def write_sweep(path, **data):
    path.write_text(yaml.safe_dump(data))
    return path


def test_groups_expand_merge_and_select(tmp_path, tiny_config):
    path = write_sweep(tmp_path / "s.yaml", name="g", base=tiny_config(), grid={"seed": [0, 1]}, groups=[
        {"name": "lm", "grid": {"task.sparsity": [1, 2]}},
        {"name": "ca", "base": {"task": {"name": "cellular_automata", "state_size": 4, "trajectory_length": 3,
                                         "batch_size": 8}}},
    ])
    sweep = load_sweep(str(path))
    runs = sweep.runs()
    assert [g for g, _ in runs] == ["lm"] * 4 + ["ca"] * 2
    assert {c.task.name for g, c in runs if g == "ca"} == {"cellular_automata"}
    sweep.override({"seed": 5, "trainer.max_steps": 7})
    assert [c.seed for _, c in sweep.runs()] == [5] * 3 and {c.trainer.max_steps for _, c in sweep.runs()} == {7}
    sweep.select(["ca"])
    assert len(sweep.runs()) == 1
    with pytest.raises(ConfigError, match="unknown group"):
        sweep.select(["nope"])


def test_group_runs_are_written_under_the_group_folder_and_resume(tmp_path, tiny_config):
    path = write_sweep(tmp_path / "s.yaml", name="g", base=tiny_config(trainer={"max_steps": 10}),
                       groups=[{"name": "a", "grid": {"seed": [0, 1]}}, {"name": "b"}])
    sweep = load_sweep(str(path))
    assert run_sweep(sweep, tmp_path / "out")["ok"] == 3
    assert len(list((tmp_path / "out" / "a").glob("*/result.json"))) == 2
    assert len(list((tmp_path / "out" / "b").glob("*/result.json"))) == 1
    assert run_sweep(sweep, tmp_path / "out")["skipped"] == 3


def test_bad_sweep_files_are_named(tmp_path):
    with pytest.raises(ConfigError, match="unknown sweep key 'grids'"):
        load_sweep(str(write_sweep(tmp_path / "a.yaml", base={}, grids={})))
    with pytest.raises(ConfigError, match=r"grid.seed .* must be a non-empty list"):
        load_sweep(str(write_sweep(tmp_path / "b.yaml", base={}, grid={"seed": 3})))
    with pytest.raises(ConfigError, match=r"groups\[0\]"):
        load_sweep(str(write_sweep(tmp_path / "c.yaml", base={}, groups=[{"grid": {}}])))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(presets()))
def test_every_preset_resolves(name):
    sweep = load_sweep(name)
    jobs = tuning.jobs_for(sweep) if sweep.tuning is not None else []
    if jobs:  # a preset that tunes first (standard): its tuning runs resolve, and its ranking runs at the base lr
        tuning_runs = tuning.tuning_sweep(sweep, jobs)
        assert len(tuning_runs.runs()) == len(tuning_runs.raw_runs()) > 0
        sweep.tuning = None
    assert len(sweep.runs()) == len(sweep.raw_runs()) > 0


@pytest.mark.parametrize("name", sorted(presets()))
def test_every_preset_expands_to_the_run_count_it_advertises(name):
    sweep = load_sweep(name)
    assert sweep.advertised is not None, f"{name} should say how many runs it has"
    assert sweep.count() == sweep.advertised
    if sweep.tuning is None or not tuning.jobs_for(sweep):  # every run's values known before any tuning
        assert len(sweep.raw_runs()) == sweep.advertised


def test_advertised_count_is_checked_and_scale_shrinks_every_run(tmp_path):
    with pytest.raises(ConfigError, match="says runs: 3 but expands to 2"):
        load_sweep(str(write_sweep(tmp_path / "a.yaml", runs=3, base={}, grid={"seed": [0, 1]})))
    sweep = load_sweep(str(write_sweep(tmp_path / "b.yaml", base={"trainer": {"max_steps": 1000}},
                                       groups=[{"name": "g", "base": {"trainer": {"eval_every": 40}}}])))
    sweep.scale = 0.1
    (_, config), = sweep.runs()
    assert config.trainer.max_steps == 100 and config.trainer.eval_every == 4


def test_seed_parallel_sweep_groups_seeds_of_one_config(tmp_path, tiny_config):
    from emergence_bench.execution.sweep import seed_groups

    path = write_sweep(tmp_path / "s.yaml", name="sp", base=tiny_config(),
                       grid={"seed": [0, 1, 2], "task.sparsity": [1, 2]})
    sweep = load_sweep(str(path))
    jobs = seed_groups([(tmp_path, c) for _, c in sweep.runs()], 2)
    assert sorted(len(configs) for _, configs in jobs) == [1, 1, 2, 2]
    for _, configs in jobs:
        assert len({c.task.params["sparsity"] for c in configs}) == 1  # a job never mixes configs
    counts = run_sweep(sweep, tmp_path / "out", seed_parallel=2, batching="always")
    assert counts["ok"] == 6
    records = [json.loads(p.read_text()) for p in (tmp_path / "out").glob("*/result.json")]
    assert sorted(r["seed_parallel"]["k"] for r in records) == [1, 1, 2, 2, 2, 2]
    assert run_sweep(sweep, tmp_path / "out", seed_parallel=2, batching="always")["skipped"] == 6


def test_a_failed_write_keeps_the_old_result(tmp_path):
    """Resume trusts result.json: an interrupted write leaves the old file whole and no temp file."""
    from emergence_bench.results.atomic import write_atomic
    from emergence_bench.results.store import write_json

    path = tmp_path / "run" / "result.json"
    write_json(path, {"status": "ok"})

    def half(f):
        f.write(b'{"status": "fa')
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_atomic(path, half)
    assert json.loads(path.read_text()) == {"status": "ok"}
    assert [p.name for p in path.parent.iterdir()] == ["result.json"]


def test_choose_mixers_keeps_the_sweeps_settings_and_adds_a_newcomer_with_its_defaults():
    sweep = Sweep("s", base={"mixer": {"name": "transformer"}},
                  grid={"mixer": [{"name": "transformer", "n_heads": 2}, {"name": "mamba", "d_state": 4}]},
                  groups=[Group("g", grid={"task.sparsity": [1, 2]})])
    before = {c["mixer"]["name"]: c for _, c in sweep.raw_runs()}
    sweep.choose_mixers(["mamba", "my_mixer"])
    runs = [c for _, c in sweep.raw_runs()]
    assert [c["mixer"] for c in runs] == [{"name": "mamba", "d_state": 4}, {"name": "mamba", "d_state": 4},
                                          {"name": "my_mixer"}, {"name": "my_mixer"}]
    assert any(c == before["mamba"] for c in runs)  # the kept mixer's runs are the same runs (same ids)
    plain = Sweep("p", base={"mixer": {"name": "transformer", "n_heads": 2}})
    plain.choose_mixers(["transformer", "rwkv7"])
    assert [c["mixer"] for _, c in plain.raw_runs()] == [{"name": "transformer", "n_heads": 2}, {"name": "rwkv7"}]
    with pytest.raises(ConfigError, match="distinct"):
        plain.choose_mixers(["rwkv7", "rwkv7"])


def test_groups_may_be_a_mapping_from_name_to_base_and_grid(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"base": {"task": {"name": "linear_map"}},
                                    "groups": {"a": {"grid": {"task.sparsity": [1, 2]}}, "b": None}}))
    sweep = load_sweep(str(path))
    assert [g.name for g in sweep.groups] == ["a", "b"] and len(sweep.raw_runs()) == 3
    path.write_text(yaml.safe_dump({"groups": {"a": [1, 2]}}))
    with pytest.raises(ConfigError, match="groups.a .* must be a mapping"):
        load_sweep(str(path))


@pytest.mark.parametrize("workers", [0, -1])
def test_no_workers_is_refused_before_anything_runs(tmp_path, workers):
    sweep = load_sweep("quick")
    with pytest.raises(ConfigError, match="--workers must be a whole number ≥ 1"):
        run_sweep(sweep, tmp_path, workers=workers)
    assert not any(tmp_path.iterdir())


def test_a_sweep_file_says_how_many_seeds_train_together_and_the_flag_overrides_it(tmp_path, tiny_config):
    from emergence_bench.cli import main

    path = write_sweep(tmp_path / "s.yaml", name="sp", base=tiny_config(trainer={"max_steps": 10}),
                       grid={"seed": [0, 1]}, seed_parallel=2, batching="always")
    assert load_sweep(str(path)).seed_parallel == 2
    assert main(["sweep", str(path), "--out", str(tmp_path / "a")]) == 0
    rows = [json.loads(p.read_text()) for p in (tmp_path / "a").glob("*/result.json")]
    assert [r["seed_parallel"]["k"] for r in rows] == [2, 2]
    assert main(["sweep", str(path), "--out", str(tmp_path / "b"), "--seed-parallel", "1"]) == 0
    assert all("seed_parallel" not in json.loads(p.read_text()) for p in (tmp_path / "b").glob("*/result.json"))
    with pytest.raises(ConfigError, match="seed_parallel must be a whole number"):
        load_sweep(str(write_sweep(tmp_path / "bad.yaml", name="bad", base=tiny_config(), seed_parallel=0)))
    with pytest.raises(ConfigError, match=r"bad.yaml: batching must be one of auto, always, got 'sometimes'"):
        load_sweep(str(write_sweep(tmp_path / "bad.yaml", name="bad", base=tiny_config(), batching="sometimes")))


def test_stages_share_the_workers_a_lower_priority_and_longer_sequences_first(tmp_path, tiny_config, monkeypatch):
    from emergence_bench.execution import sweep as sweeps

    order = []

    def fake_run(config, out):  # records the order the runs are taken in
        order.append((config["seed"], config["task"]["state_size"]))
        return {"run_id": sweeps.resolve(config).run_id(), "status": "ok", "error": None, "emergence_step": None}

    monkeypatch.setattr(sweeps, "_run_one", fake_run)

    def sweep(name, seeds, sizes):
        return Sweep(name, tiny_config(), grid={"seed": seeds, "task.state_size": sizes})

    ranking = sweeps.Stage(sweep("r", [0], [4, 8]), tmp_path / "r", priority=1)
    tuning_stage = sweeps.Stage(sweep("t", [100, 101], [4]), tmp_path / "t", priority=0)
    unlocked = []

    def follow(finished):  # the first tuning run unlocks one more (a widening)
        if finished and not unlocked:
            unlocked.append(sweeps.Stage(sweep("t", [102], [4]), tmp_path / "t", priority=0))
            return unlocked
        return []

    log = tmp_path / "log"
    with open(log, "w") as stream:
        counts = sweeps.run_stages([ranking, tuning_stage], stream=stream, follow=follow, announced={"r": 3})
    # Tuning first, the unlocked run before the ranking queued earlier; in the ranking, the longer sequences first.
    assert order == [(100, 4), (101, 4), (102, 4), (0, 8), (0, 4)]
    assert counts["t"]["total"] == 3 and counts["t"]["ok"] == 3 and counts["r"]["ok"] == 2
    text = log.read_text()
    assert "[r] 3 runs, 0 already finished, 2 to run (the other 1 follow their mixer's tuning)" in text
    assert "[t] 3/3 done" in text and "[r] 2/3 done" in text


def test_the_closing_line_names_the_next_command_rank_for_a_ladder(tmp_path, tiny_config, capsys):
    from emergence_bench.cli import main

    for command, ladder in (("leaderboard", {}), ("rank", {"ladder": "toy-v1"})):
        path = write_sweep(tmp_path / f"{command}.yaml", name=command, grid={"seed": [0]}, **ladder,
                           base=tiny_config(trainer={"max_steps": 5, "eval_every": 5}))
        out = tmp_path / command
        assert main(["sweep", str(path), "--out", str(out)]) == 0
        err = capsys.readouterr().err
        assert f"next: `emergence-bench {command} {out}`, then `emergence-bench report {out}`" in err


def test_a_groups_mixers_keys_shape_that_mixer_in_its_runs_and_its_tuning_and_a_flag_wins(tmp_path):
    """Ladder v4's families need different heads (the linear map 8 of 8, induction 2 of 32): a group's
    ``mixers`` sets keys of one mixer in that group only, in the ranking and in the tuning runs."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "base": {"task": {"name": "linear_map"}, "trainer": {"max_steps": 10}},
        "grid": {"seed": [0], "mixer": [{"name": "transformer", "n_heads": 2, "head_dim": 32}, {"name": "lru"}]},
        "tuning": {"seeds": [100], "grid": {"optim.lr": [1e-3, 3e-3]}},
        "groups": [{"name": "lm", "grid": {"task.sparsity": [1, 2, 3]},
                    "mixers": {"transformer": {"n_heads": 8, "head_dim": 8}}},
                   {"name": "other", "grid": {"task.sparsity": [1, 2, 3]}}]}))
    sweep = load_sweep(str(path))
    shapes = {(group, c["mixer"]["name"]): (c["mixer"].get("n_heads"), c["mixer"].get("head_dim"))
              for group, c in tuning.tuning_sweep(sweep, tuning.jobs_for(sweep)).raw_runs()}
    assert shapes == {("lm", "transformer"): (8, 8), ("lm", "lru"): (None, None),
                      ("other", "transformer"): (2, 32), ("other", "lru"): (None, None)}
    sweep.override({"mixer.n_heads": 4})  # as `sweep FILE --mixer.n_heads 4` applies it
    _mixer_keys_on_axis(sweep, {"mixer.n_heads": 4})
    assert {c["mixer"]["n_heads"] for g, c in tuning.tuning_sweep(sweep, tuning.jobs_for(sweep)).raw_runs()
            if c["mixer"]["name"] == "transformer"} == {4}
    assert {c["mixer"]["head_dim"] for g, c in tuning.tuning_sweep(sweep, tuning.jobs_for(sweep)).raw_runs()
            if g == "lm" and c["mixer"]["name"] == "transformer"} == {8}
    path.write_text(yaml.safe_dump({"groups": [{"name": "a", "mixers": {"transformer": {"name": "lru"}}}]}))
    with pytest.raises(ConfigError, match="may not set a mixer's name"):
        load_sweep(str(path))
    path.write_text(yaml.safe_dump({"groups": [{"name": "a", "mixers": ["transformer"]}]}))
    with pytest.raises(ConfigError, match="must map a mixer name to its keys"):
        load_sweep(str(path))


def test_the_eta_counts_the_stages_still_to_come_from_the_first_line(tmp_path, tiny_config, monkeypatch):
    """A plugin's sweep: its tuning runs first, its ranking runs (announced) only once the tuning has
    chosen. The ETA of the tuning's first line covers both (it covered the tuning alone: a fraction
    of the sweep's time)."""
    import re
    import time

    from emergence_bench.execution import sweep as sweeps

    def fake_run(config, out):  # one second a run
        time.sleep(1.0)
        return {"run_id": sweeps.resolve(config).run_id(), "status": "ok", "error": None, "emergence_step": None}

    monkeypatch.setattr(sweeps, "_run_one", fake_run)
    tuning_stage = sweeps.Stage(Sweep("t", tiny_config(), grid={"seed": [100]}), tmp_path / "t", priority=0)
    ranking = sweeps.Stage(Sweep("r", tiny_config(), grid={"seed": [0, 1, 2, 3]}), tmp_path / "r", priority=1)

    unlocked = []

    def follow(finished):  # the tuning's run unlocks the ranking, once
        if finished and not unlocked:
            unlocked.append(ranking)
            return unlocked
        return []

    log = tmp_path / "log"
    with open(log, "w") as stream:
        sweeps.run_stages([tuning_stage], stream=stream, follow=follow, announced={"r": 4})
    first = next(line for line in log.read_text().splitlines() if line.startswith("[t] 1/1 done"))
    eta = re.search(r"eta (\d+):(\d+):(\d+)", first)
    assert int(eta.group(2)) * 60 + int(eta.group(3)) >= 3, first  # 4 runs of about 1 s to come
    assert "[r] 4 runs, 0 already finished, 4 to run" in log.read_text()
