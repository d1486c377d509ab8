"""The tuning protocol: the choice rule, edges and widening, the frozen tuned ladder, a plugin tuned
before it is ranked."""

import json
import subprocess
import sys

import pytest

from emergence_bench.config import ConfigError
from emergence_bench.execution import tuning
from emergence_bench.execution.choice_rule import Point, choose, edges, measure, widenable, widened
from emergence_bench.execution.sweep_spec import load_sweep


def row(step, status="ok", budget=600):
    """A result row as the rule reads it: emerged at ``step`` (None: never, within ``budget``)."""
    return {"status": status, "emergence": {"step": step}, "timing": {"steps": step or budget},
            "config": {"trainer": {"max_steps": budget}}}


def point(lr, steps, **status):
    return measure({"optim.lr": lr}, [[row(s, **status) for s in steps]])


def test_measure_counts_diverged_as_not_emerged_and_leaves_failed_out():
    p = measure({"optim.lr": 1e-3}, [[row(100), row(None, "diverged"), row(None, "failed")]])
    assert (p.runs, p.failed, p.emerged, p.area) == (2, 1, 1, 0.5)
    assert p.median_emergence_step == 100  # half emerged by step 100: the KM median is reached there


def test_choice_rule_area_first_then_median_then_smaller_lr():
    # The higher area wins although its runs emerge later.
    assert choose([point(1e-3, [100, 100, None, None]), point(3e-3, [500, 500, 500, None])]).values["optim.lr"] == 3e-3
    # Equal area: the lower Kaplan–Meier median emergence step wins.
    chosen = choose([point(1e-3, [300, 300]), point(3e-3, [200, 200]), point(1e-2, [250, 250])])
    assert chosen.values["optim.lr"] == 3e-3
    # Equal area and median: the smaller learning rate.
    assert choose([point(3e-3, [200, 200]), point(1e-3, [200, 200])]).values["optim.lr"] == 1e-3
    # Nothing emerged anywhere (median not reached everywhere): a tie, so the smallest lr.
    assert choose([point(lr, [None, None]) for lr in (1e-2, 1e-3, 3e-3)]).values["optim.lr"] == 1e-3


def test_a_median_not_reached_is_worse_than_any_reached_one():
    # Equal areas: a median reached late (step 590) beats one not reached at all.
    reached = point(1e-3, [590, 590, None, None])
    assert reached.median_emergence_step == 590
    assert reached.merit() < Point({"optim.lr": 1e-2}, runs=4, emerged=2, area=0.5).merit()


def test_unmeasured_points_are_skipped_and_none_measured_is_an_error():
    assert choose([Point({"optim.lr": 1e-2}), point(1e-3, [None])]).values["optim.lr"] == 1e-3
    with pytest.raises(ConfigError, match="every run failed"):
        choose([Point({"optim.lr": 1e-3}), point(3e-3, [None], status="failed")])


def test_an_edge_is_flagged_only_when_strictly_better_than_its_neighbour():
    grid = [point(1e-3, [None, None]), point(3e-3, [400, None]), point(1e-2, [300, 300])]
    assert edges(grid, choose(grid)) == {"optim.lr": "high"}
    low = [point(1e-3, [200, 200]), point(3e-3, [300, 300]), point(1e-2, [None, None])]
    assert edges(low, choose(low)) == {"optim.lr": "low"}
    # On the edge only by the tie-break (equal merit): the best does not lie beyond it.
    flat = [point(lr, [200, 200]) for lr in (1e-3, 3e-3, 1e-2)]
    assert choose(flat).values["optim.lr"] == 1e-3 and edges(flat, choose(flat)) == {}
    # Inside the grid: no edge.
    inside = [point(1e-3, [None]), point(3e-3, [100]), point(1e-2, [None])]
    assert edges(inside, choose(inside)) == {}


def test_a_non_numeric_or_single_value_axis_is_never_widened():
    assert not widenable([0.0, 0.1]) and not widenable([1e-3]) and not widenable(["a", "b"])
    assert widenable([3e-4, 1e-3])


def test_widening_continues_the_grid_at_its_own_spacing():
    assert widened([3e-4, 1e-3, 3e-3, 1e-2], "high") == 3e-2
    assert widened([3e-4, 1e-3, 3e-3, 1e-2], "low") == 1e-4
    assert widened([1e-3, 1e-2], "high") == 0.1
    assert widened([1e-4, 2e-4, 4e-4], "high") == 8e-4


def test_tuned_ladder_v2_is_ladder_v2_with_each_mixers_tuned_lr():
    tuned, shared = load_sweep("standard-cpu-v2-tuned"), load_sweep("standard-cpu-v2")
    assert tuned.ladder == "v2-tuned" and tuned.tuning is not None and shared.tuning is None
    assert tuned.tuning.seeds == [100, 101, 102, 103] and tuned.tuning.rung == "middle"
    assert len(tuned.tuning.grid["optim.lr"]) >= 4
    mixers = [m["name"] for m in tuned.grid["mixer"]]
    groups = [g.name for g in tuned.groups]
    # Every built-in mixer has a frozen lr for every group, so `sweep standard-cpu` tunes nothing.
    assert tuning.jobs_for(tuned) == []
    assert sorted(tuned.tuned) == sorted(mixers) and all(sorted(tuned.tuned[m]) == sorted(groups) for m in mixers)
    runs, shared_runs = tuned.raw_runs(), shared.raw_runs()
    assert len(runs) == len(shared_runs) == tuned.advertised == 672
    for (group, config), (shared_group, shared_config) in zip(runs, shared_runs):
        assert group == shared_group
        assert config["optim"]["lr"] == tuned.tuned[config["mixer"]["name"]][group]["optim.lr"]
        assert {**config, "optim": {}} == {**shared_config, "optim": {}}  # the same ladder but for the lr
        assert config["optim"]["weight_decay"] == shared_config["optim"]["weight_decay"]
    assert {c["optim"]["lr"] for _, c in shared_runs} == {1e-3}
    # The tuning seeds are disjoint from the ranking's and its reproduction's (0-15).
    assert not set(tuned.tuning.seeds) & set(range(16))


# Tuned ladder v3's frozen choices (docs/ladder-history.md's tuning tables): a change is a new ladder version.
TUNED_V3 = {
    "transformer": {"linear-map": 1e-3, "cellular-automata": 3e-3, "mqar": 3e-4, "dyck": 1e-2},
    "mlp_mixer": {"linear-map": 1e-3, "cellular-automata": 3e-3, "mqar": 3e-4, "dyck": 3e-3},
    "mamba": {"linear-map": 3e-4, "cellular-automata": 3e-3, "mqar": 1e-2, "dyck": 1e-2},
    "gated_deltanet": {"linear-map": 1e-3, "cellular-automata": 1e-2, "mqar": 1e-2, "dyck": 3e-3},
    "rwkv7": {"linear-map": 3e-4, "cellular-automata": 3e-3, "mqar": 1e-3, "dyck": 3e-3},
    "mlstm": {"linear-map": 1e-3, "cellular-automata": 3e-3, "mqar": 3e-3, "dyck": 3e-3},
    "lru": {"linear-map": 1e-3, "cellular-automata": 3e-3, "mqar": 1e-3, "dyck": 1e-2},
}


def test_tuned_ladder_v3_freezes_every_mixers_lr_by_v2s_protocol():
    v3, v2 = load_sweep("standard-cpu"), load_sweep("standard-cpu-v2-tuned")
    assert v3.ladder == "v3-tuned" and v3.tuning == v2.tuning  # the same protocol, seeds and grid
    assert {m: {g: values["optim.lr"] for g, values in groups.items()} for m, groups in v3.tuned.items()} == TUNED_V3
    assert tuning.jobs_for(v3) == []  # every built-in mixer frozen for every family: nothing to tune
    runs = v3.raw_runs()
    assert len(runs) == v3.advertised == 672
    assert all(c["optim"]["lr"] == TUNED_V3[c["mixer"]["name"]][group] for group, c in runs)


def test_the_gpu_twin_has_the_same_protocol():
    gpu = load_sweep("standard")
    assert gpu.tuning is not None and gpu.tuning.rung == "middle" and gpu.ladder
    assert set(gpu.tuning.seeds).isdisjoint(range(16)) and len(gpu.tuning.grid["optim.lr"]) >= 4
    assert [g.name for g in gpu.groups] == [g.name for g in load_sweep("standard-cpu").groups]
    # No value frozen yet: the first sweep on a device tunes all seven; otherwise it is standard-v2.
    assert len(tuning.jobs_for(gpu)) == 7 * 4
    gpu.tuning = None
    assert gpu.raw_runs() == load_sweep("standard-v2").raw_runs()


def test_setting_the_lr_by_hand_turns_tuning_off():
    sweep = load_sweep("standard-cpu")
    sweep.override({"optim.lr": 3e-3})
    assert sweep.tuning is None and {c["optim"]["lr"] for _, c in sweep.raw_runs()} == {3e-3}


def test_bad_tuning_sections_are_refused(tmp_path):
    base = ("name: t\nbase: {task: {name: linear_map}}\ngroups: [{name: g, grid: {task.sparsity: [1, 2]}}]\n")
    for bad, message in (("tuning: {seeds: [], grid: {optim.lr: [1e-3]}}", "seeds"),
                         ("tuning: {seeds: [1], grid: {optim.lr: [1e-3]}, rung: top}", "middle or all"),
                         ("tuning: {seeds: [1], grid: {optim.lr: [1e-3]}, widen_by: 2}", "unknown tuning key"),
                         ("tuning: {seeds: [1], grid: {optim.lr: [1e-3]}, task_seeds: 100}", "task_seeds"),
                         ("tuning: {seeds: [1], grid: {optim.lr: [1e-3]}, task_seeds: [7, 7]}", "task_seeds"),
                         ("tuning: {seeds: [1], grid: {optim.lr: [1e-3]}}\ntuned: {lru: {h: {optim.lr: 1e-3}}}",
                          "no group 'h'"),
                         ("tuning: {seeds: [1], grid: {optim.lr: [1e-3]}}\ntuned: {lru: {g: {optim.wd: 0}}}",
                          "exactly the tuning grid's keys")):
        path = tmp_path / "t.yaml"
        path.write_text(base + bad + "\n")
        with pytest.raises(ConfigError, match=message):
            load_sweep(str(path))


def test_tuning_task_seeds_replace_the_ranking_instances_in_the_tuning_runs_only(tmp_path):
    """``tuning.task_seeds``: the tuning trains on instances of its own; the ranking keeps the sweep's."""
    path = tmp_path / "t.yaml"
    path.write_text("name: t\nbase: {task: {name: linear_map}}\ngrid: {seed: [0, 1], task.task_seed: [0, 1]}\n"
                    "groups: [{name: g, grid: {task.sparsity: [1, 2, 3]}}]\n"
                    "tuning: {seeds: [100, 101], grid: {optim.lr: [1e-3, 3e-3]}, task_seeds: [100]}\n")
    sweep = load_sweep(str(path))
    jobs = tuning.jobs_for(sweep)
    tuning_runs = [c for _, c in tuning.tuning_sweep(sweep, jobs).raw_runs()]
    assert {c["task"]["task_seed"] for c in tuning_runs} == {100}
    assert {c["task"]["sparsity"] for c in tuning_runs} == {2} and len(tuning_runs) == 2 * 2  # seeds x lrs
    sweep.tuning = None
    assert {c["task"]["task_seed"] for _, c in sweep.raw_runs()} == {0, 1}


TINY = """
name: tiny
ladder: tiny-v1
seed_parallel: 2
batching: always
tuning: {seeds: [100, 101], seed_parallel: 2, grid: {optim.lr: [1.0e-3, 3.0e-3, 1.0e-2]}, widen: 1}
tuned: {transformer: {lm: {optim.lr: 3.0e-3}}}
base:
  model: {d_model: 16, n_layers: 1, mlp_ratio: 2}
  trainer: {max_steps: 40, eval_every: 20, eval_batches: 1}
  callbacks: {emergence: {threshold: 0.95, stop: true}}
grid:
  seed: [0, 1]
  mixer: [{name: transformer, n_heads: 2, head_dim: 8}]
groups:
  - {name: lm, base: {task: {name: linear_map, state_size: 4, sparsity: 1, trajectory_length: 2, batch_size: 8}},
     grid: {task.sparsity: [1, 2]}}
"""


def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "emergence_bench", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow  # three CLI processes; the rule, edges and the frozen ladder have fast tests above
def test_a_plugin_is_tuned_first_then_ranked_at_its_choice_and_it_resumes(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    first = cli("sweep", "tiny.yaml", "--mixers", "transformer,lru", "--out", "out", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    # The progress says the plugin (lru) is tuned first, on the middle rung of 2 (sparsity 2), and what it chose.
    assert "[tiny:tuning] 6 runs, 0 already finished" in first.stderr
    chosen = [line for line in first.stderr.splitlines() if "lru on lm: chose optim.lr=" in line]
    assert len(chosen) == 1
    lr = float(chosen[0].split("optim.lr=")[1].split()[0])
    tables = json.loads((tmp_path / "out" / "tuning" / "tuning.json").read_text())["tables"]
    assert [(t["mixer"], t["group"], t["rungs"]) for t in tables] == [("lru", "lm", [2])]
    rows = [json.loads(p.read_text()) for p in (tmp_path / "out" / "lm").glob("*/result.json")]
    assert sorted((r["config"]["mixer"]["name"], r["config"]["optim"]["lr"]) for r in rows) == \
        sorted([("lru", lr)] * 4 + [("transformer", 3e-3)] * 4)
    # Rerun: the tuning and the ranking are both finished, nothing trains again.
    again = cli("sweep", "tiny.yaml", "--mixers", "transformer,lru", "--out", "out", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "[tiny:tuning] 6 runs, 6 already finished, 0 to run" in again.stderr
    assert "[tiny] 8 runs, 8 already finished, 0 to run" in again.stderr
    # rank leaves the tuning runs out, and prints and records each mixer's lr and the tuning table.
    ranked = cli("rank", "out", cwd=tmp_path)
    assert ranked.returncode == 0, ranked.stderr
    data = json.loads((tmp_path / "out" / "rank.json").read_text())
    assert data["lr"] == {"lru": {"linear_map": [lr]}, "transformer": {"linear_map": [3e-3]}}
    assert [t["mixer"] for t in data["tuning"]] == ["lru"]
    assert {c["seeds"] for c in data["cells"]} == {2}  # seeds 0 and 1 only: no tuning seed joined a cell
    flag = " none works" if data["tuning"][0]["none_works"] else ""  # (at 40 steps no lr may work)
    assert "| lru | " + f"{lr:.0e}".replace("e-0", "e-") + flag + " |" in ranked.stdout


WIDENS = """
name: widens
ladder: widens-v1
tuning: {seeds: [100, 101], grid: {optim.lr: [1.0e-3, 3.0e-3]}, widen: 1}
tuned: {transformer: {lm: {optim.lr: 3.0e-3}}}
base:
  model: {d_model: 16, n_layers: 1, mlp_ratio: 2}
  trainer: {max_steps: 40, eval_every: 20, eval_batches: 1}
grid:
  seed: [0, 1]
  mixer: [{name: transformer, n_heads: 2, head_dim: 8}, {name: lru}]
groups:
  - {name: lm, base: {task: {name: linear_map, state_size: 4, sparsity: 1, trajectory_length: 2, batch_size: 8}},
     grid: {task.sparsity: [1, 2]}}
"""


def tune_then_rank(tmp_path, monkeypatch, emergence_step, text=WIDENS) -> tuple[list[str], list[tuple], dict]:
    """``text`` (WIDENS) tuned then ranked with each run faked: ``emergence_step(lr)`` is its step (None:
    never). Returns what the tuning said, each run taken as (where, mixer, lr, seed), and the sweep's counts."""
    from emergence_bench.config import resolve
    from emergence_bench.execution import sweep as sweeps
    from emergence_bench.results.store import SCHEMA_VERSION, write_json

    taken = []

    def fake_run(config, out):
        c = resolve(config)
        lr, where = c.optim.lr, "tuning" if out.rstrip("/").split("/")[-2] == "tuning" else "ranking"
        taken.append((where, c.mixer.name, lr, c.seed))
        step = emergence_step(lr)
        write_json(f"{out}/{c.run_id()}/result.json", {
            "schema_version": SCHEMA_VERSION, "run_id": c.run_id(), "status": "ok", "config": c.to_dict(),
            "emergence": {"step": step}, "timing": {"steps": step or 40}})
        return {"run_id": c.run_id(), "status": "ok", "error": None, "emergence_step": step}

    monkeypatch.setattr(sweeps, "_run_one", fake_run)
    (tmp_path / "widens.yaml").write_text(text)
    sweep = load_sweep(str(tmp_path / "widens.yaml"))
    said: list[str] = []
    pipeline = tuning.TuneThenRank(sweep, tmp_path / "out", tuning.jobs_for(sweep), said.append,
                                   lambda this, folder, tunes: sweeps.Stage(this, folder, priority=0 if tunes else 1))
    with open(tmp_path / "log", "w") as stream:
        counts = sweeps.run_stages(pipeline.first(), stream=stream, follow=pipeline,
                                   announced={"widens": sweep.count()})
    return said, taken, counts


def test_a_widening_runs_before_any_ranking_run_and_its_choice_unlocks_the_mixers_ranking(tmp_path, monkeypatch):
    # Emerges sooner the higher the lr, up to 3e-3; never at 9e-3.
    said, taken, counts = tune_then_rank(tmp_path, monkeypatch, lambda lr: {1e-3: 20, 3e-3: 10}.get(lr))
    # lru's grid widens past 3e-3 (strictly best on the high edge) to 9e-3, whose runs go before every
    # ranking run, the frozen Transformer's included; then 3e-3 is chosen and lru's ranking runs follow.
    assert said[0].endswith("lru on lm: best at the high edge of optim.lr, grid widened to [0.001, 0.003, 0.009]")
    assert said[1].endswith("lru on lm: chose optim.lr=0.003")
    stages = [where if where == "ranking" else f"tuning {lr}" for where, _, lr, _ in taken]
    assert sorted(stages[:4]) == ["tuning 0.001"] * 2 + ["tuning 0.003"] * 2
    assert stages[4:] == ["tuning 0.009"] * 2 + ["ranking"] * 8
    assert {(m, lr) for where, m, lr, _ in taken if where == "ranking"} == {("transformer", 3e-3), ("lru", 3e-3)}
    assert counts["widens:tuning"]["total"] == 6 and counts["widens"]["ok"] == 8
    table = json.loads((tmp_path / "out" / "tuning" / "tuning.json").read_text())["tables"][0]
    assert table["widened"] == [{"key": "optim.lr", "side": "high", "value": 0.009}] and table["edge"] is None


def test_a_tuning_where_nothing_emerges_says_none_works_everywhere_it_shows_its_choice(tmp_path, monkeypatch):
    """No lr makes a run emerge: the choice (the tie-break's smallest lr) is flagged "none works" in the
    printed line, in the tuning table, in rank's lr column and in the tuning curves, never shown as an
    optimum; a table where some run emerged is not flagged."""
    from emergence_bench.reporting import rank
    from emergence_bench.reporting.figures.tuning_curves import tuning_figure
    from emergence_bench.results.store import none_works

    said, _, _ = tune_then_rank(tmp_path, monkeypatch, lambda lr: None)
    assert len(said) == 1 and "lru on lm: chose optim.lr=0.001 — none works at any value" in said[0]
    table = json.loads((tmp_path / "out" / "tuning" / "tuning.json").read_text())["tables"][0]
    assert table["none_works"] is True and none_works(table)
    working = {**table, "points": [{**table["points"][0], "area": 0.5}, *table["points"][1:]]}
    assert not none_works(working)
    ranked, markdown = rank.write(tmp_path / "out")
    lru_row = next(line for line in markdown.splitlines() if line.startswith("| ") and " lru " in line)
    assert "1e-3 none works" in lru_row
    (panel,) = [ax for ax in tuning_figure([table]).axes if ax.get_visible()]
    assert panel.get_title().endswith("\nnone works (×): lru") and not panel.texts  # above the data, not on it


def test_a_group_of_one_setting_is_tuned_on_it_as_a_ladder_of_one_rung(tmp_path, monkeypatch):
    """A group without a ladder (claims-cpu-v2-recurrent's) names its one setting as a one-rung ladder:
    `rung: middle` is that rung, the tuning runs on it, and the ranking runs at the choice with the run
    ids the group has without the axis (it sets the base's value). Without the axis, the error says so."""
    one_rung = WIDENS.replace("grid: {task.sparsity: [1, 2]}", "grid: {task.sparsity: [1]}")
    assert one_rung != WIDENS
    # 1e-3 is best and on the low edge: the grid widens once (to 3.3e-4, which never emerges), on the same rung.
    said, taken, counts = tune_then_rank(tmp_path, monkeypatch, lambda lr: {1e-3: 20, 3e-3: 30}.get(lr), one_rung)
    assert said[0].endswith("lru on lm: best at the low edge of optim.lr, grid widened to [0.000333, 0.001, 0.003]")
    assert said[1].endswith("lru on lm: chose optim.lr=0.001") and len(said) == 2
    assert sorted((round(lr, 6), seed) for where, _, lr, seed in taken if where == "tuning") == \
        [(0.000333, 100), (0.000333, 101), (0.001, 100), (0.001, 101), (0.003, 100), (0.003, 101)]
    assert {(m, lr) for where, m, lr, _ in taken if where == "ranking"} == {("transformer", 3e-3), ("lru", 1e-3)}
    assert counts["widens:tuning"]["total"] == 6 and counts["widens"]["ok"] == 4
    table = json.loads((tmp_path / "out" / "tuning" / "tuning.json").read_text())["tables"][0]
    assert (table["rung_axis"], table["rungs"], table["chosen"]) == ("task.sparsity", [1], {"optim.lr": 1e-3})
    tuned_runs = [json.loads(p.read_text()) for p in (tmp_path / "out" / "tuning" / "lm").glob("*/result.json")]
    assert {r["config"]["task"]["sparsity"] for r in tuned_runs} == {1} and len(tuned_runs) == 6
    with_axis = load_sweep(str(tmp_path / "widens.yaml"))
    (tmp_path / "bare.yaml").write_text(one_rung.replace("grid: {task.sparsity: [1]}", "grid: {}"))
    bare = load_sweep(str(tmp_path / "bare.yaml"))
    for sweep in (with_axis, bare):
        sweep.tuned["lru"] = {"lm": {"optim.lr": 1e-3}}
    assert [c.run_id() for _, c in with_axis.runs()] == [c.run_id() for _, c in bare.runs()]
    with pytest.raises(ConfigError, match=r"names it as a ladder of one rung, e\.g\. task\.sparsity: \[3\]"):
        tuning.tuning_sweep(bare, tuning.jobs_for(bare, retune=True))


def test_a_ranking_that_joins_after_its_tuning_writes_the_ladder_file_rank_reads(tmp_path, monkeypatch):
    """Every mixer tuned here: the ranking's runs join only as the choices come, and DIR/ladder.json (the
    ladder and the learning-speed families, which `rank` reads) is written then, not only for stages known
    at the start (ladder v4's sweep had none)."""
    text = "\n".join(line for line in WIDENS.splitlines() if not line.startswith("tuned:"))
    tune_then_rank(tmp_path, monkeypatch, lambda lr: {1e-3: 20, 3e-3: 10}.get(lr), text=text)
    assert json.loads((tmp_path / "out" / "ladder.json").read_text())["ladder"] == "widens-v1"
    assert not (tmp_path / "out" / "tuning" / "ladder.json").exists()
