"""The replication of claims 1, 3 and 8: judged as its own stage and never pooled with the first
stage's rows, a verdict only on its whole design, claim 2 by the abruptness rule, its preset the first
stage's groups on fresh seeds, its sizes the power analysis's, and its design still the one hashed."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_claims import STEPS, row

from emergence_bench.claims import claims, preregistration, replication_power
from emergence_bench.claims.claim import CLAIMS
from emergence_bench.claims.design import SEEDS, TASK_SEEDS
from emergence_bench.claims.judge import judge, judge_folder, patching_runs
from emergence_bench.claims.replication import PRESET, REPLICATION, RUNS, STAGE, seeds
from emergence_bench.execution.sweep_spec import load_sweep, presets
from emergence_bench.results.store import SCHEMA_VERSION
from emergence_bench.stats.significance import holm

ROOT = Path(__file__).resolve().parents[1]
SPREAD_OUT = {seed: 300 + 40 * (seed % 20) for seed in range(300)}  # seeds differ: 300 to 1,060 steps


def emergence_rows(seed_list: range | tuple[int, ...], spread: bool) -> list[dict[str, Any]]:
    """One emergence-group row per seed and task instance; ``spread``: the step varies by seed,
    else every seed of an instance emerges at the same step."""
    return [row(s, t, emergence=SPREAD_OUT[s % 300] if spread else 400 + 200 * t) for s in seed_list
            for t in TASK_SEEDS]


def by_claim(card: list) -> dict[str, Any]:
    return {r.claim.id + (f"[{r.label}]" if r.label else ""): r for r in card}


def test_the_replication_is_its_own_stage_and_never_pools_with_the_first_stage():
    first = emergence_rows(SEEDS, spread=False)  # the first stage: seeds do not differ
    again = emergence_rows(seeds(RUNS["seeds-differ"]), spread=True)  # the replication: they do
    alone = by_claim(judge({"emergence": first}, claims()))
    both = by_claim(judge({"emergence": first + again}, claims()))
    for claim in ("seeds-differ", "abrupt", "abrupt-with-attention"):  # the first stage's rows do not move
        assert (both[claim].outcome.effect, both[claim].outcome.p, both[claim].p_adjusted, both[claim].verdict) == \
            (alone[claim].outcome.effect, alone[claim].outcome.p, alone[claim].p_adjusted, alone[claim].verdict)
    assert both["seeds-differ"].verdict == "disagrees" and both["seeds-differ"].outcome.n == "16"
    assert both["seeds-differ-replication"].verdict == "agrees" and both["seeds-differ-replication"].outcome.n == "88"
    assert alone["seeds-differ-replication"].verdict == "not run"
    # Holm within each stage: the replication's family is its own rows only.
    card = judge({"emergence": first + again}, claims())
    for stage in ("confirmation", STAGE):
        rows = [r for r in card if r.claim.stage == stage]
        raw = [r.outcome.p if r.p_adjusted is not None else None for r in rows]
        assert [r.p_adjusted for r in rows] == holm(raw) and any(p is not None for p in raw)


def test_a_replication_row_waits_for_its_whole_design():
    partial = emergence_rows(seeds(RUNS["seeds-differ"])[:20], spread=True)
    verdict = by_claim(judge({"emergence": partial}, list(REPLICATION)))["seeds-differ-replication"]
    assert verdict.outcome.p < 0.05 and verdict.verdict == "inconclusive" and verdict.p_adjusted is None
    assert verdict.reason == "an arm has 40 of the design's 88 runs"


def test_a_folder_of_replication_runs_shows_the_replication_alone(tmp_path: Path):
    for r in emergence_rows(seeds(RUNS["seeds-differ"]), spread=True):
        folder = tmp_path / "emergence" / r["run_id"]
        folder.mkdir(parents=True)
        (folder / "result.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION, **r}))
    card = judge_folder(tmp_path)
    assert {r.claim.stage for r in card} == {STAGE}
    assert [r.claim.id for r in card] == [c.id for c in REPLICATION]
    verdicts = {r.claim.id: r.verdict for r in card}
    assert verdicts["seeds-differ-replication"] == "agrees" and verdicts["curricula-replication"] == "not run"


def test_patching_reads_the_confirmation_seeds_of_every_stage_and_no_others():
    runs = [row(s, t) for s in (0, 7, 100, 199, 200, 215, 216) for t in (0, 1, 100)]
    assert {(r["seed"], r["config"]["task"]["task_seed"]) for r in patching_runs(runs)} == \
        {(s, t) for s in (0, 7, 200, 215) for t in (0, 1)}


def test_claim_2_by_the_rule_agrees_on_drops_after_a_plateau_and_disagrees_on_power_laws():
    rule = CLAIMS.get("abrupt-by-rule-replication")
    late = [row(s, t, plateau=800) for s in seeds(RUNS["abrupt-by-rule"]) for t in TASK_SEEDS]
    abrupt = judge({"emergence": late}, [rule])[0]
    assert abrupt.verdict == "agrees" and abrupt.outcome.effect == 1.0 and abrupt.outcome.n == "88"
    smooth = [[0.69 * (1 + t / 30) ** -1.0] * 3 for t in STEPS]
    power_law = [row(s, t, cells=smooth) for s in seeds(RUNS["abrupt-by-rule"]) for t in TASK_SEEDS]
    assert judge({"emergence": power_law}, [rule])[0].verdict == "disagrees"


def test_the_preset_is_the_first_stages_groups_on_fresh_seeds():
    replication, first = load_sweep(PRESET), load_sweep("claims-cpu-v2")

    def configs(sweep: Any, group: str) -> tuple[set[int], list[str]]:
        runs = [raw for name, raw in sweep.raw_runs() if name == group]
        return {raw["seed"] for raw in runs}, sorted(json.dumps({**raw, "seed": None}, sort_keys=True) for raw in runs)

    for group in ("emergence", "patching", "curricula"):
        own, settings = configs(replication, group)
        _, first_settings = configs(first, group)
        assert sorted(set(settings)) == sorted(set(first_settings))  # every setting the first stage's
        readers = [c for c in REPLICATION if group in c.groups]
        assert own == set(max((c.settings["seeds"] for c in readers), key=len))  # no run that no claim reads
        assert all(c.settings["task_seeds"] == TASK_SEEDS for c in readers)
    # Disjoint from every seed any other preset or experiment file names, and from the first stage's.
    used: set[int] = {s for c in claims() if c.stage != STAGE for s in c.settings["seeds"]}
    for source in [*presets().values(), *(ROOT / "docs" / "experiments").glob("*.yaml")]:
        if source.stem != PRESET:
            used |= seeds_in(yaml.safe_load(source.read_text(encoding="utf-8")))
    mine = {s for c in REPLICATION for s in c.settings["seeds"]}
    assert {0, 47, 100, 107} <= used and not mine & used


def seeds_in(node: Any) -> set[int]:
    """Every value of a key named ``seed`` or ``seeds`` anywhere in a YAML document (a sweep's grid, a
    tuning's seeds, a plan's seed)."""
    if isinstance(node, list):
        return {s for item in node for s in seeds_in(item)}
    if not isinstance(node, dict):
        return set()
    found = {s for key, value in node.items() if key in ("seed", "seeds")
             for s in (value if isinstance(value, list) else [value]) if isinstance(s, int)}
    return found | {s for value in node.values() for s in seeds_in(value)}


def test_the_design_still_matches_its_pre_registered_hash():
    problem = preregistration.check(PRESET, STAGE)
    assert problem is None, problem


def test_a_changed_design_fails_the_hash_and_says_how_to_declare_again(tmp_path: Path, monkeypatch):
    stored = json.loads(preregistration.path(PRESET).read_text(encoding="utf-8"))
    design = stored["design"]
    design["claims"][0]["settings"]["seeds"] = design["claims"][0]["settings"]["seeds"][:-1]
    design["runs"]["emergence"] = design["runs"]["emergence"][:-2]
    (tmp_path / f"{PRESET}.design.json").write_text(json.dumps({"sha256": preregistration.digest(design),
                                                                "design": design}))
    monkeypatch.setattr(preregistration, "PRESETS_DIR", tmp_path)
    problem = preregistration.check(PRESET, STAGE)
    assert problem is not None
    assert "claim seeds-differ-replication: settings" in problem and "group emergence: 2 run id(s) new" in problem
    assert "declare it again" in problem and "If any has started, the design stands as declared" in problem
    (tmp_path / f"{PRESET}.design.json").unlink()
    assert "never declared" in (preregistration.check(PRESET, STAGE) or "")


def test_the_declared_sizes_are_the_power_analysis_s():
    assert replication_power.size(replication_power.patching_power)[0] == RUNS["few-heads"]
    assert replication_power.abrupt_power(RUNS["abrupt-by-rule"]) >= replication_power.TARGET
    arms = ("after dyck", "after neural_ca")
    declared = [replication_power.curriculum_power(arm, RUNS["curricula"]) for arm in arms]
    smaller = [replication_power.curriculum_power(arm, RUNS["curricula"] - 8) for arm in arms]
    assert min(declared) >= replication_power.TARGET > min(smaller)
    assert RUNS["abrupt-by-rule"] == RUNS["seeds-differ"]  # claim 2 reads claim 1's group, sized for claim 1


@pytest.mark.slow
def test_the_power_table_in_the_docs_is_the_power_analysis():
    planned = replication_power.plan()
    page = (ROOT / "docs" / "claims.md").read_text(encoding="utf-8")
    assert replication_power.table(planned) in page
    searched = {r.row.split(". ")[1].split("[")[0]: r.runs for r in planned if r.searched}
    assert searched == {"seeds-differ": RUNS["seeds-differ"], "few-heads": RUNS["few-heads"],
                        "curricula": RUNS["curricula"]}
    assert all(math.isfinite(r.power) and r.power >= replication_power.TARGET for r in planned)
