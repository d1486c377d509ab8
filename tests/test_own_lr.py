"""Claim 7's recurrent mixers at their own lr (emergence_bench.claims.own_lr): the preset tunes by the
ranking's protocol on the exploration seeds and reruns claims-cpu-v2's `recurrent` group at the choice
in a group of its own, beside and apart from the first stage's runs; its claim reads that group, as a
stage of its own, and the first stage's row at the Transformer's lr stays as it was."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml
from test_claims import row

from emergence_bench.claims import claims, preregistration
from emergence_bench.claims.architectures import TRAILS
from emergence_bench.claims.claim import CLAIMS
from emergence_bench.claims.design import EXPLORATION_SEEDS, SEEDS, TASK_SEEDS, frozen
from emergence_bench.claims.judge import judge, judge_folder, rows_by_group
from emergence_bench.claims.own_lr import GROUP, PRESET, STAGE, TRAILS_OWN_LR, TUNING
from emergence_bench.cli import main
from emergence_bench.config import resolve
from emergence_bench.execution import tuning
from emergence_bench.execution.sweep_spec import PRESETS_DIR, Sweep, load_sweep
from emergence_bench.results.store import SCHEMA_VERSION, load_groups
from emergence_bench.stats.significance import holm

MIXERS = ["mamba", "gated_deltanet", "rwkv7"]
# claims-cpu-v2's 544 run ids ("group/run id", sorted, one a line), as its first stage trained them: a
# change would leave its rows behind (and a claims reference built from them would no longer apply).
FIRST_STAGE_IDS = "4f0785e17c9b278398f7c866b3cf94cc254c91fa28002bdb3f49b2176463ce87"


def at(sweep: Sweep, lr: float) -> Sweep:
    """``sweep`` with every mixer's tuned lr set to ``lr`` (as if its tuning had chosen it)."""
    tuned = copy.deepcopy(sweep)
    tuned.tuned = {name: {GROUP: {"optim.lr": lr}} for name in MIXERS}
    return tuned


def ids(sweep: Sweep) -> dict[str, str]:
    """Run id -> group, of every run of ``sweep``."""
    return {resolve(raw).run_id(): group for group, raw in sweep.raw_runs()}


def settings(raw: dict[str, Any]) -> str:
    """A run's resolved config but its seed, task instance and lr: the settings two runs share."""
    config = json.loads(json.dumps(resolve(raw).to_dict()))
    config["seed"] = config["task"]["task_seed"] = config["optim"]["lr"] = None
    return json.dumps(config, sort_keys=True)


def test_the_preset_tunes_by_the_rankings_protocol_and_has_no_choice_yet():
    sweep = load_sweep(PRESET)
    assert sweep.tuning == load_sweep("standard-cpu-v4").tuning  # the ranking's protocol, unchanged
    assert sweep.tuning is not None and sweep.tuning.seeds == list(TUNING["tuning_seeds"]) == list(EXPLORATION_SEEDS)
    assert sweep.tuning.task_seeds == list(TUNING["tuning_task_seeds"]) == [100] and sweep.tuning.rung == "middle"
    assert sweep.tuning.grid == {"optim.lr": list(TUNING["lr_grid"])} and sweep.tuning.widen == TUNING["widen"]
    assert sweep.tuning.prune is TUNING["prune"] and sweep.tuning.seed_parallel == 4
    assert sweep.tuned == {} and sweep.count() == sweep.advertised == 48
    assert [g.name for g in sweep.groups] == [GROUP] and [job.name for job in tuning.jobs_for(sweep)] == MIXERS


def test_the_dry_run_lists_the_tuning_on_the_exploration_seeds(capsys):
    assert main(["sweep", PRESET, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    listed = out.split()
    assert len(listed) == 48 and all(name.startswith(f"tuning/{GROUP}/linear_map-") for name in listed)
    assert "48 tuning runs of gated_deltanet, mamba, rwkv7; their ranking runs follow at the chosen values" in err
    sweep = load_sweep(PRESET)
    runs = [raw for _, raw in tuning.tuning_sweep(sweep, tuning.jobs_for(sweep)).raw_runs()]
    assert sorted(listed) == sorted(f"tuning/{GROUP}/{resolve(raw).run_id()}" for raw in runs)
    plan = {(raw["mixer"]["name"], raw["seed"], raw["task"]["task_seed"], raw["optim"]["lr"]) for raw in runs}
    assert plan == {(m, s, 100, lr) for m in MIXERS for s in EXPLORATION_SEEDS for lr in TUNING["lr_grid"]}
    # Each mixer at exactly the recurrent group's settings but the seeds, the instance and the lr.
    recurrent = [raw for group, raw in load_sweep("claims-cpu-v2").raw_runs() if group == "recurrent"]
    assert {settings(raw) for raw in runs} == {settings(raw) for raw in recurrent} and len(recurrent) == 48


def test_the_rerun_is_the_recurrent_group_on_the_claims_design_at_each_mixers_lr():
    sweep = at(load_sweep(PRESET), 3e-3)
    runs = sweep.raw_runs()
    assert {group for group, _ in runs} == {GROUP} and len(runs) == 48
    cells = sorted((raw["mixer"]["name"], raw["seed"], raw["task"]["task_seed"]) for _, raw in runs)
    assert cells == sorted((m, s, t) for m in MIXERS for s in SEEDS for t in TASK_SEEDS)
    assert {raw["optim"]["lr"] for _, raw in runs} == {3e-3}
    recurrent = [raw for group, raw in load_sweep("claims-cpu-v2").raw_runs() if group == "recurrent"]
    assert sorted(settings(raw) for _, raw in runs) == sorted(settings(raw) for raw in recurrent)
    assert sweep.seed_parallel == 1  # one seed at a time, as the first stage trained


def test_its_run_ids_never_take_the_place_of_claims_cpu_v2_s():
    first = load_sweep("claims-cpu-v2")
    first_ids = ids(first)
    lines = "\n".join(sorted(f"{group}/{run_id}" for run_id, group in first_ids.items()))
    assert len(first_ids) == 544 and hashlib.sha256(lines.encode()).hexdigest() == FIRST_STAGE_IDS
    sweep = load_sweep(PRESET)
    tuning_ids = {resolve(raw).run_id() for _, raw in tuning.tuning_sweep(sweep, tuning.jobs_for(sweep)).raw_runs()}
    assert len(tuning_ids) == 48 and not tuning_ids & set(first_ids)
    for lr in TUNING["lr_grid"]:
        rerun = ids(at(sweep, lr))
        assert set(rerun.values()) == {GROUP} and len(rerun) == 48
        shared = set(rerun) & set(first_ids)
        # At the Transformer's lr a mixer's rerun is its first-stage runs again (the same configs), kept
        # apart in their own group's folder; at any other lr no id is claims-cpu-v2's.
        assert shared == (set(rerun) if lr == 1e-3 else set())
        assert {first_ids[run_id] for run_id in shared} <= {"recurrent"}


def test_the_claim_reads_its_own_group_and_is_not_run_without_it():
    transformer = [row(s, t, emergence=400 + 10 * s) for s in SEEDS for t in TASK_SEEDS]

    def mixers(step: dict[str, int | None]) -> list[dict[str, Any]]:
        return [row(s, t, emergence=None if step[name] is None else step[name] + 10 * s, attention=False,
                    config={"mixer": {"name": name}}) for name in step for s in SEEDS for t in TASK_SEEDS]

    at_1e3 = mixers({"mamba": None, "rwkv7": None})  # today's rows: never emerged
    own = mixers({"mamba": 900, "rwkv7": 100})  # at their own lr: Mamba later, RWKV-7 sooner than the Transformer
    rows = {"emergence": transformer, "recurrent": at_1e3, GROUP: own}
    card = {(r.claim.id, r.label): r for r in judge(rows, claims())}
    assert {label: r.verdict for (claim, label), r in card.items() if claim == TRAILS_OWN_LR.id} == \
        {"mamba": "agrees", "rwkv7": "disagrees"}
    assert {label: r.verdict for (claim, label), r in card.items() if claim == TRAILS.id} == \
        {"mamba": "agrees", "rwkv7": "agrees"}
    assert card[(TRAILS_OWN_LR.id, "mamba")].outcome.n == "16 vs 16"
    # Each stage its own Holm family: the own-lr rows never move the first stage's adjusted p.
    alone = {(r.claim.id, r.label): r.p_adjusted for r in judge({k: v for k, v in rows.items() if k != GROUP},
                                                                claims()) if r.claim.stage == "confirmation"}
    assert alone == {key: r.p_adjusted for key, r in card.items() if r.claim.stage == "confirmation"}
    own_rows = [r for r in card.values() if r.claim.stage == STAGE]
    assert [r.p_adjusted for r in own_rows] == holm([r.outcome.p for r in own_rows])
    # Without its group: not run, and today's row reads as before.
    without = {(r.claim.id, r.label): r for r in judge({"emergence": transformer, "recurrent": at_1e3}, claims())}
    assert without[(TRAILS_OWN_LR.id, "")].verdict == "not run"
    assert without[(TRAILS_OWN_LR.id, "")].reason == f"no confirmation rows in group(s) {GROUP}"
    assert without[(TRAILS.id, "mamba")].outcome == card[(TRAILS.id, "mamba")].outcome
    # Part of the design: an arm short of its 16 runs never gets a verdict.
    partial = judge({"emergence": transformer, GROUP: [r for r in own if r["seed"] < 4]}, [TRAILS_OWN_LR])
    assert {r.verdict for r in partial} == {"inconclusive"} and "8 of the design's 16" in partial[0].reason


def write_folder(folder: Path, groups: dict[str, list[dict[str, Any]]]) -> Path:
    for group, found in groups.items():
        for i, r in enumerate(found):
            (folder / group / f"{r['run_id']}-{i}").mkdir(parents=True)
            (folder / group / f"{r['run_id']}-{i}" / "result.json").write_text(
                json.dumps({"schema_version": SCHEMA_VERSION, **r}))
    return folder


def test_a_claims_folder_shows_the_own_lr_stage_once_its_group_is_there(tmp_path: Path):
    transformer = [row(s, t, emergence=400 + 10 * s) for s in SEEDS for t in TASK_SEEDS]
    mamba = [row(s, t, emergence=None, attention=False, config={"mixer": {"name": "mamba"}})
             for s in SEEDS for t in TASK_SEEDS]
    first = write_folder(tmp_path / "first", {"emergence": transformer, "recurrent": mamba})
    before = judge_folder(first)
    assert {r.claim.stage for r in before} == {"confirmation"}  # a stage none of whose runs are here is hidden
    both = write_folder(tmp_path / "both", {"emergence": transformer, "recurrent": mamba, GROUP: mamba})
    after = judge_folder(both)
    assert [(r.claim.id, r.label, r.verdict) for r in after if r.claim.stage == STAGE] == \
        [(TRAILS_OWN_LR.id, "mamba", "agrees")]
    assert [(r.claim.id, r.label, r.verdict, r.p_adjusted) for r in before] == \
        [(r.claim.id, r.label, r.verdict, r.p_adjusted) for r in after if r.claim.stage == "confirmation"]
    # The tuning's rows (DIR/tuning/<group>) are read by no claim, nor by the folder's groups.
    tuned = [row(s, 100, emergence=20, attention=False, config={"mixer": {"name": "mamba"}}) for s in EXPLORATION_SEEDS]
    write_folder(both / "tuning", {GROUP: tuned})
    assert "tuning" not in rows_by_group(both) and "tuning" not in load_groups(both)
    assert [(r.claim.id, r.label, r.verdict, r.p_adjusted) for r in judge_folder(both)] == \
        [(r.claim.id, r.label, r.verdict, r.p_adjusted) for r in after]


def test_todays_row_is_declared_as_it_was_and_labelled_at_the_transformers_lr():
    today = CLAIMS.get("trails-transformer")
    assert (today.id, today.number, today.groups, today.statistic, today.predicts, today.stage) == \
        ("trails-transformer", 7, ("recurrent", "emergence"), "log-rank test of the emergence step",
         "longer for the mixer", "confirmation")
    assert dict(today.settings) == dict(frozen(width=64, n_layers=1, lr=1e-3)) and today.across_mixers
    assert "at the Transformer's lr (1e-3)" in today.effect
    new = TRAILS_OWN_LR
    assert (new.number, new.groups, new.statistic, new.predicts, new.kind, new.stage, new.paper) == \
        (7, (GROUP, "emergence"), today.statistic, today.predicts, today.kind, STAGE, today.paper)
    assert new.settings["seeds"] == SEEDS and new.settings["task_seeds"] == TASK_SEEDS
    preset = load_sweep(PRESET)
    assert preset.grid["seed"] == list(SEEDS) and preset.grid["task.task_seed"] == list(TASK_SEEDS)
    assert [c.id for c in claims() if c.stage == STAGE] == [new.id]


def test_the_design_still_matches_its_pre_registered_hash():
    problem = preregistration.check(PRESET, STAGE)
    assert problem is None, problem


def test_the_hash_stands_when_the_tuned_values_are_frozen(tmp_path: Path):
    """``tuned:`` is an outcome, filled once the tuning has run: the design's record does not read it
    (each rerun is named by its config without the lr), but any other setting of the runs it does."""
    data = yaml.safe_load((PRESETS_DIR / f"{PRESET}.yaml").read_text(encoding="utf-8"))
    data["tuned"] = {name: {GROUP: {"optim.lr": 3e-3}} for name in MIXERS}
    (tmp_path / "frozen.yaml").write_text(yaml.safe_dump(data))
    declared = preregistration.preset_runs(PRESET)
    assert preregistration.preset_runs(str(tmp_path / "frozen.yaml")) == declared
    assert sorted(declared) == [GROUP, f"tuning/{GROUP}"] and len(declared[GROUP]) == 48
    assert all("-untuned-" in name for name in declared[GROUP])
    data["base"]["trainer"]["max_steps"] = 2000
    (tmp_path / "longer.yaml").write_text(yaml.safe_dump(data))
    longer = preregistration.preset_runs(str(tmp_path / "longer.yaml"))
    assert not set(longer[GROUP]) & set(declared[GROUP])
    assert not set(longer[f"tuning/{GROUP}"]) & set(declared[f"tuning/{GROUP}"])
