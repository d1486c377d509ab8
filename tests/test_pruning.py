"""Pruning a tuning (execution/pruning.py): a point stops once the choice rule cannot pick it, and the
rule then chooses, and widens, exactly as it would have after every point's full budget."""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path

import pytest

from emergence_bench.execution import choice_rule, tuning
from emergence_bench.execution.pruning import Rivals, best_case
from emergence_bench.results.store import SCHEMA_VERSION, write_json

BUDGET = 600
CONFIG = {"trainer": {"max_steps": BUDGET}}  # what a row needs of its config here


def write_point(folder: Path, name: str, steps: list[int | None], pruned: dict | None = None) -> list[str]:
    """Rows of one point's seeds (emerged at ``steps``, None: never) under ``folder``; their folders."""
    folders = []
    for seed, step in enumerate(steps):
        run = folder / f"{name}-seed{seed}"
        row = {"schema_version": SCHEMA_VERSION, "run_id": run.name, "status": "ok", "config": CONFIG,
               "emergence": {"step": step},
               "timing": {"steps": step or BUDGET}, **({"pruned": pruned} if pruned else {})}
        write_json(run / "result.json", row)
        folders.append(str(run))
    return folders


def rivals_of(tmp_path: Path, *points: list[int | None]) -> Rivals:
    return Rivals(own=[], points=[write_point(tmp_path, f"p{i}", steps) for i, steps in enumerate(points)],
                  values=[{"optim.lr": 10.0 ** -i} for i in range(len(points))])


def test_a_point_is_pruned_only_when_its_best_case_is_strictly_worse(tmp_path):
    rivals = rivals_of(tmp_path, [100, 100, 150, 200])  # area 1, median 100
    live = ("live", None)
    assert rivals.check(75, [live] * 4) is None  # could still emerge at 76 < 100
    assert rivals.check(99, [live] * 4) is None  # the best case ties at 100: the tie-break may still pick it
    pruned = rivals.check(100, [("emerged", 50), live, live, live])
    assert pruned == {"step": 100, "by": {"optim.lr": 1.0}, "by_area": 1.0, "by_median_emergence_step": 100.0,
                      "best_case_area": 1.0, "best_case_median": 101.0}
    # A lower area is worse at any median; a seed that ended (diverged) caps the area.
    assert rivals.check(25, [("ended", 20), live, live, live]) is not None
    # Nothing left to train: the group ends by itself.
    assert rivals.check(200, [("emerged", 150)] * 4) is None
    # A failed seed is retried on resume: its point's merit is not known, so it is never pruned.
    assert rivals.check(100, [("failed", None), live, live, live]) is None


def test_there_is_no_bar_until_a_rival_has_finished_and_none_from_a_pruned_or_failed_one(tmp_path):
    unfinished = rivals_of(tmp_path, [100, 100, 100, 100])
    Path(unfinished.points[0][3], "result.json").unlink()
    assert unfinished.bar() is None and unfinished.check(500, [("live", None)] * 4) is None
    pruned_rival = Rivals([], [write_point(tmp_path, "q", [25, None, None, None], pruned={"step": 25})],
                          [{"optim.lr": 1.0}])
    assert pruned_rival.bar() is None
    nothing_emerged = rivals_of(tmp_path / "n", [None] * 4)  # area 0: nothing to fall below
    assert nothing_emerged.check(500, [("ended", 100)] * 3 + [("live", None)]) is None
    # A rival with a failed run (retried on resume) sets no bar either.
    failed = rivals_of(tmp_path / "f", [25, 25, 25, 25])
    row = json.loads(Path(failed.points[0][0], "result.json").read_text())
    write_json(Path(failed.points[0][0]) / "result.json", {**row, "status": "failed"})
    assert failed.bar() is None


def test_a_failed_seed_is_left_out_of_the_best_case_as_the_rule_leaves_it():
    assert best_case(100, [("failed", None), ("emerged", 50), ("live", None), ("live", None)]) == (-1.0, 101.0)
    assert best_case(100, [("ended", 80), ("emerged", 50), ("live", None), ("live", None)])[0] == -0.75
    # Two seeds diverged early: censored where they ended, the median is the one that emerged (KM).
    assert best_case(1000, [("ended", 50), ("ended", 50), ("emerged", 100), ("live", None)]) == (-0.5, 100.0)


def test_rivals_travel_to_a_worker_through_its_pipe(tmp_path):
    rivals = rivals_of(tmp_path, [100, 200, None, None])
    again = pickle.loads(pickle.dumps(rivals))  # what Workers' pipe does to a job's arguments
    assert (again.own, again.points, again.values) == (rivals.own, rivals.points, rivals.values)
    assert again.bar() == rivals.bar()


def test_the_middle_of_the_grid_trains_first():
    grid = {"optim.lr": [3e-4, 1e-3, 3e-3, 1e-2]}
    assert [p["optim.lr"] for p in tuning.middle_first(grid)] == [1e-3, 3e-3, 3e-4, 1e-2]
    two = tuning.middle_first({"a": [1, 2, 3], "b": ["x", "y"]})
    assert two[:2] == [{"a": 2, "b": "x"}, {"a": 2, "b": "y"}] and len(two) == 6


# A seed's whole run: ("emerged", step), ("diverged", step) or ("never", None).
Truth = tuple[str, "int | None"]


def full_row(seed: Truth) -> dict:
    """The row a seed's run ends with at the full budget."""
    state, step = seed
    if state == "diverged":
        return {"status": "diverged", "emergence": {"step": None}, "timing": {"steps": step}}
    return {"status": "ok", "emergence": {"step": step}, "timing": {"steps": step or BUDGET}}


def at_eval(seed: Truth, t: int) -> tuple[str, int | None]:
    """Where the seed stands after step ``t``, as the group sees it."""
    state, step = seed
    if step is not None and step <= t:
        return ("emerged", step) if state == "emerged" else ("ended", step)
    return "live", None


def prune_in_order(tmp_path: Path, truth: dict[float, list[Truth]], every: int) -> dict[float, list[dict]]:
    """Each point trained in ``middle_first`` order, stopped at the first eval its Rivals prune it
    at; returns the rows each point would then have."""
    lrs = [p["optim.lr"] for p in tuning.middle_first({"optim.lr": sorted(truth)})]
    folders = {lr: [str(tmp_path / f"{lr}-seed{s}") for s in range(len(truth[lr]))] for lr in lrs}
    rows = {}
    for lr in lrs:
        others = [o for o in lrs if o != lr]
        rivals = Rivals(folders[lr], [folders[o] for o in others], [{"optim.lr": o} for o in others])
        section = None
        for t in range(every, BUDGET + 1, every):
            outcomes = [at_eval(seed, t) for seed in truth[lr]]
            if all(state != "live" for state, _ in outcomes):
                break
            section = rivals.check(t, outcomes)
            if section is not None:
                break
        rows[lr] = []
        for index, seed in enumerate(truth[lr]):
            row = full_row(seed)
            if section is not None and at_eval(seed, section["step"])[0] == "live":
                row = {"status": "ok", "emergence": {"step": None}, "timing": {"steps": section["step"]},
                       "pruned": section}
            write_json(Path(folders[lr][index]) / "result.json",
                       {"schema_version": SCHEMA_VERSION, "run_id": f"{lr}-seed{index}", "config": CONFIG, **row})
            rows[lr].append(row)
    return rows


def choice_and_edges(rows: dict[float, list[dict]]) -> tuple[dict, dict]:
    points = [choice_rule.measure({"optim.lr": lr}, [runs]) for lr, runs in sorted(rows.items())]
    chosen = choice_rule.choose(points)
    return chosen.values, choice_rule.edges(points, chosen)


def test_pruning_never_changes_the_choice_or_the_widening(tmp_path):
    """Random tunings (4 seeds a point, evals every 5 steps; seeds that emerge, never do, or diverge):
    the rule chooses, and finds edges, on the pruned rows as on the full ones, and pruning does stop
    points."""
    draw = random.Random(7)
    steps = list(range(5, BUDGET + 1, 5))

    def seed(hard: bool) -> Truth:
        if draw.random() < 0.15:
            return "diverged", draw.choice(steps)
        return ("never", None) if hard or draw.random() < 0.2 else ("emerged", draw.choice(steps))

    # Two seeds of 3e-3 diverge at step 50, so its Kaplan–Meier median is its first emergence (100):
    # it beats 1e-3, trained first, only because a diverged seed leaves the risk set where it ended.
    diverging = {3e-4: [("never", None)] * 4, 1e-2: [("never", None)] * 4,
                 1e-3: [("emerged", 300), ("emerged", 400), ("never", None), ("never", None)],
                 3e-3: [("diverged", 50), ("diverged", 50), ("emerged", 100), ("emerged", 590)]}
    pruned = prune_in_order(tmp_path / "diverging", diverging, every=5)
    assert choice_and_edges(pruned)[0] == {"optim.lr": 3e-3}
    pruned_points = 0
    for trial in range(60):
        grid = [3e-4, 1e-3, 3e-3, 1e-2] + ([3e-2] if trial % 3 == 0 else [])
        truth = {lr: [seed(hard) for _ in range(4)] for lr in grid for hard in [draw.random() < 0.2]}
        full = {lr: [full_row(s) for s in seeds] for lr, seeds in truth.items()}
        pruned = prune_in_order(tmp_path / str(trial), truth, every=5)
        assert choice_and_edges(pruned) == choice_and_edges(full), (trial, truth)
        pruned_points += sum(any(r.get("pruned") for r in runs) for runs in pruned.values())
    assert pruned_points > 40  # it does prune: a test that never pruned would prove nothing


@pytest.mark.parametrize("finished", [True, False])
def test_a_group_stops_at_the_eval_its_rivals_prune_it(finished, tmp_path, tiny_config):
    """A real batched group whose rival point emerged at step 4 on every seed: with that point's rows
    all written, the group (emerging at no step: threshold 1) stops at its first eval, step 4, every
    row saying why; with one of them missing it trains its whole budget."""
    from emergence_bench.config import resolve
    from emergence_bench.engine.seed_parallel import run_seed_parallel

    configs = [tiny_config(seed=seed, callbacks={"emergence": {"threshold": 1.0, "relative": False}},
                           trainer={"eval_every": 4}) for seed in range(4)]
    own = [str(tmp_path / "runs" / resolve(c).run_id()) for c in configs]
    rival = write_point(tmp_path / "rival", "fast", [4, 4, 4, 4])
    if not finished:
        Path(rival[0], "result.json").unlink()
    rows = run_seed_parallel(configs, tmp_path / "runs", stop=Rivals(own, [rival], [{"optim.lr": 0.1}]))
    assert {row["status"] for row in rows} == {"ok"}
    assert all(row["emergence"]["step"] is None for row in rows)
    if finished:
        assert [row["timing"]["steps"] for row in rows] == [4] * 4
        assert all(row["pruned"]["step"] == 4 and row["pruned"]["by"] == {"optim.lr": 0.1} for row in rows)
        on_disk = json.loads(Path(own[0], "result.json").read_text())
        assert on_disk["pruned"]["by_median_emergence_step"] == 4.0
    else:
        assert [row["timing"]["steps"] for row in rows] == [20] * 4 and not any("pruned" in row for row in rows)


def test_a_group_that_is_not_the_whole_point_is_never_pruned(tmp_path, tiny_config):
    from emergence_bench.config import resolve
    from emergence_bench.engine.seed_parallel import run_seed_parallel

    configs = [tiny_config(seed=seed, callbacks={"emergence": {"threshold": 1.0, "relative": False}},
                           trainer={"eval_every": 4}) for seed in range(2)]
    own = [str(tmp_path / "runs" / resolve(c).run_id()) for c in configs] + [str(tmp_path / "runs" / "seed2")]
    rival = write_point(tmp_path / "rival", "fast", [4, 4, 4, 4])
    rows = run_seed_parallel(configs, tmp_path / "runs", stop=Rivals(own, [rival], [{"optim.lr": 0.1}]))
    assert [row["timing"]["steps"] for row in rows] == [20] * 2


PRESET = """
name: pruned
ladder: pruned-v1
tuning: {seeds: [100, 101], seed_parallel: 2, grid: {optim.lr: [1.0e-3, 3.0e-3, 1.0e-2]}, widen: 1}
base:
  model: {d_model: 16, n_layers: 1, mlp_ratio: 2}
  trainer: {max_steps: 40, eval_every: 20, eval_batches: 1}
grid:
  seed: [0, 1]
  mixer: [{name: lru}, {name: transformer, n_heads: 2, head_dim: 8}]
groups:
  - {name: lm, base: {task: {name: linear_map, state_size: 4, sparsity: 1, trajectory_length: 2, batch_size: 8}},
     grid: {task.sparsity: [1, 2]}}
  - {name: wide, base: {task: {name: linear_map, state_size: 8, sparsity: 1, trajectory_length: 2, batch_size: 8}},
     grid: {task.sparsity: [1, 2]}}
"""


@pytest.mark.parametrize("prune", [True, False])
def test_every_jobs_middle_trains_first_and_each_point_gets_its_rivals(prune, tmp_path, monkeypatch):
    """Two mixers in two families tuned over three lrs: every middle (3e-3) trains before any next
    point, though one family has more tokens a step (which the queue otherwise takes first), the
    Transformer's widened points (best on the high edge) as soon as their grids end; each tuning group gets its
    point's Rivals (its own runs, every other point of its grid as it has grown), the ranking's
    groups none, and none at all with ``prune: false``."""
    from emergence_bench.config import resolve
    from emergence_bench.execution import sweep as sweeps
    from emergence_bench.execution.sweep_spec import load_sweep

    taken = []
    emerges = {"lru": {1e-3: 20, 3e-3: 10}, "transformer": {1e-3: 20, 3e-3: 10, 1e-2: 5, 3e-2: 5}}

    def fake_group(configs, out, batching="auto", rivals=None):
        resolved = [resolve(c) for c in configs]
        mixer, lr, tuned = resolved[0].mixer.name, resolved[0].optim.lr, Path(out).parent.name == "tuning"
        taken.append((tuned, (Path(out).name, mixer), lr, rivals, [str(Path(out) / c.run_id()) for c in resolved]))
        step = emerges[mixer].get(lr)
        for c in resolved:
            write_json(Path(out) / c.run_id() / "result.json", {
                "schema_version": SCHEMA_VERSION, "run_id": c.run_id(), "status": "ok", "config": c.to_dict(),
                "emergence": {"step": step}, "timing": {"steps": step or 40}})
        return [{"run_id": c.run_id(), "status": "ok", "error": None, "emergence_step": step} for c in resolved]

    monkeypatch.setattr(sweeps, "_run_group", fake_group)
    (tmp_path / "p.yaml").write_text(PRESET.replace("widen: 1}", f"widen: 1, prune: {str(prune).lower()}}}"))
    sweep = load_sweep(str(tmp_path / "p.yaml"))
    pipeline = tuning.TuneThenRank(sweep, tmp_path / "out", tuning.jobs_for(sweep), lambda line: None,
                                   lambda this, folder, tunes: sweeps.Stage(this, folder, seed_parallel=2))
    with open(tmp_path / "log", "w") as stream:
        sweeps.run_stages(pipeline.first(), stream=stream, follow=pipeline, announced={"pruned": 16})
    tuned = [(mixer, lr, rivals, own) for is_tuning, mixer, lr, rivals, own in taken if is_tuning]
    # (a widening's point goes ahead of the places still queued: 3e-2 as soon as its grid has ended)
    assert [lr for _, lr, _, _ in tuned] == [3e-3] * 4 + [1e-3] * 4 + [1e-2, 1e-2, 3e-2, 1e-2, 1e-2, 3e-2]
    assert [is_tuning for is_tuning, *_ in taken] == [True] * 14 + [False] * 8  # then the rankings (2 rungs each)
    assert all(rivals is None for is_tuning, _, _, rivals, _ in taken if not is_tuning)
    if not prune:
        assert all(rivals is None for _, _, rivals, _ in tuned)
        return
    folders = {(job, lr): own for job, lr, _, own in tuned}
    for job, lr, rivals, own in tuned:
        assert rivals.own == own
        others = [o for j, o in folders if j == job and o != lr and (o != 3e-2 or lr == 3e-2)]  # 3e-2 joins later
        assert sorted(map(sorted, rivals.points)) == sorted(sorted(folders[job, o]) for o in others)
        assert sorted(v["optim.lr"] for v in rivals.values) == sorted(others)


def test_the_tuning_curves_draw_a_pruned_point_hollow_and_say_so():
    from emergence_bench.reporting.figures.tuning_curves import tuning_figure

    def point(lr, area, pruned=None):
        return {"values": {"optim.lr": lr}, "runs": 4, "failed": 0, "emerged": int(4 * area), "area": area,
                "area_low": 0.0, "area_high": 1.0, "median_emergence_step": 100.0, "pruned": pruned}

    def table(pruned):
        return {"mixer": "lru", "group": "lm", "family": "linear_map", "rung_axis": "task.sparsity", "rungs": [2],
                "grid": {"optim.lr": [1e-3, 3e-3]}, "chosen": {"optim.lr": 3e-3}, "edge": None,
                "points": [point(1e-3, 0.25, pruned), point(3e-3, 1.0)]}

    def hollow(figure):
        return [list(line.get_xdata()) for ax in figure.axes for line in ax.lines
                if line.get_markerfacecolor() in ("white", (1.0, 1.0, 1.0, 1.0))]

    def keyed(figure):
        return any("pruned" in text.get_text() for legend in figure.legends for text in legend.get_texts())

    drawn = tuning_figure([table({"step": 75, "by": {"optim.lr": 3e-3}})])
    assert len(hollow(drawn)) == 1 and keyed(drawn)
    plain = tuning_figure([table(None)])
    assert hollow(plain) == [] and not keyed(plain)
