"""The claims and their scorecard on constructed rows: verdicts that follow the data, n/a and not run
with their reasons, Holm over the claims, the confirmation seeds only, the frozen preset, the CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from emergence_bench.claims import claims
from emergence_bench.claims.claim import CLAIMS
from emergence_bench.claims.design import SEEDS, TASK_SEEDS
from emergence_bench.claims.heads import independence_fit
from emergence_bench.claims.judge import judge as judge_claims
from emergence_bench.execution.sweep_spec import load_sweep
from emergence_bench.results.store import SCHEMA_VERSION
from emergence_bench.stats.significance import holm

BUDGET = 1500
STEPS = list(range(20, BUDGET + 1, 20))


def row(seed: int, task_seed: int = 0, emergence: int | None = 500, plateau: int | None = 200,
        attention: bool = True, config: dict[str, Any] | None = None, cells: list[list[float]] | None = None,
        **sections: Any) -> dict[str, Any]:
    """A trained run's row with what the claims read (its eval curves: a logistic drop at ``plateau``)."""
    base = {"task": {"name": "linear_map", "state_size": 12, "sparsity": 3, "task_seed": task_seed},
            "mixer": {"name": "transformer", "n_heads": 8, "head_dim": 8}, "model": {"n_layers": 1},
            "trainer": {"max_steps": BUDGET}, "callbacks": {}, "curriculum": []}
    for key, value in (config or {}).items():
        node = base
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    drop = plateau or BUDGET * 2
    loss = [0.69 / (1 + math.exp((t - drop) / 10)) for t in STEPS]
    return {"run_id": f"r{seed}-{task_seed}-{id(base)}", "status": "ok", "seed": seed, "config": base,
            "timing": {"steps": BUDGET}, "emergence": {"step": emergence}, "plateau": {"first_drop_step": plateau},
            "attention_probe": ({"applicable": True,
                                 "history": [[t, 1 - value / 0.69, 1.0] for t, value in zip(STEPS, loss)]}
                                if attention else {"applicable": False, "not_applicable": "no scores"}),
            "curves": {"eval": [[t, value, 1 - value] for t, value in zip(STEPS, loss)],
                       "eval_cells": [[t, [value] * 3] for t, value in zip(STEPS, cells or loss)] if cells is None
                       else [[t, list(c)] for t, c in zip(STEPS, cells)]},
            "task_facts": {"chance_loss": math.log(2), "floor_loss": 0.0, "shortcut_cells": [False] * 3},
            **sections}


def cell(rows: list[dict[str, Any]], claim_id: str, label: str = "") -> Any:
    card = judge_claims({"emergence": rows} if not isinstance(rows, dict) else rows, [CLAIMS.get(claim_id)])
    return next(r for r in card if r.label == label)


def confirmation(**kwargs: Any) -> list[dict[str, Any]]:
    """One row per confirmation seed and task instance, built by ``row``."""
    return [row(seed, task_seed, **kwargs) for seed in SEEDS for task_seed in TASK_SEEDS]


def bias_rows(plateau: int, jitter: int = 7) -> dict[str, list[dict[str, Any]]]:
    """The emergence group's unbiased rows (plateau ~400) and the bias group's three arms, the true
    pattern's plateau ending near ``plateau``."""
    plain = [row(s, t, plateau=400 + jitter * s + t) for s in SEEDS for t in TASK_SEEDS]
    bias = [row(s, t, plateau=(plateau if pattern == "predict" else 400) + jitter * s + t,
                config={"callbacks.attention_bias": {"strength": 5.0, "pattern": pattern}})
            for pattern in ("predict", "placebo", "near_miss") for s in SEEDS for t in TASK_SEEDS]
    return {"emergence": plain, "bias": bias}


def judge(rows: dict[str, list[dict[str, Any]]], claim_id: str) -> dict[str, Any]:
    return {r.label: r for r in judge_claims(rows, [CLAIMS.get(claim_id)])}


def test_the_bias_agrees_when_the_true_pattern_ends_the_plateau_sooner_than_every_control():
    verdicts = judge(bias_rows(plateau=100), "bias-removes-plateau")
    assert {label: r.verdict for label, r in verdicts.items()} == {
        "vs none": "agrees", "vs placebo": "agrees", "vs near miss": "agrees"}
    none = verdicts["vs none"].outcome
    assert none.effect == pytest.approx((100 + 7 * 3) / (400 + 7 * 3), rel=0.05) and none.high < 1


def test_a_claim_whose_data_go_the_other_way_disagrees():
    verdicts = judge(bias_rows(plateau=900), "bias-removes-plateau")
    assert all(r.verdict == "disagrees" for r in verdicts.values())
    assert all(r.outcome.effect > 1 and r.outcome.direction == -1 for r in verdicts.values())


def test_too_few_seeds_is_inconclusive_and_names_what_they_could_detect():
    rows = bias_rows(plateau=200)
    few = {group: [r for r in runs if r["seed"] in (0, 1) and r["config"]["task"]["task_seed"] == 0]
           for group, runs in rows.items()}
    verdict = judge(few, "bias-removes-plateau")["vs none"]
    assert verdict.verdict == "inconclusive" and verdict.outcome.direction == 1
    assert verdict.outcome.detectable is None or "ratio" in verdict.outcome.detectable
    assert verdict.reason == "an arm has 2 of the design's 16 runs"
    # One run against sixteen: the log-rank p is small, but an unfinished arm never gets a verdict.
    partial = {**rows, "bias": [r for r in rows["bias"] if r["seed"] == 0 and r["config"]["task"]["task_seed"] == 0]}
    one = judge(partial, "bias-removes-plateau")["vs none"]
    assert one.outcome.p < 0.05 and one.verdict == "inconclusive" and "1 of the design's 16" in one.reason
    assert one.p_adjusted is None  # and it is not in the Holm family
    # Sixteen a side but no effect: inconclusive for want of evidence, with what these seeds detect.
    null = judge(bias_rows(plateau=400), "bias-removes-plateau")["vs none"]
    assert null.verdict == "inconclusive" and "not significant; these seeds detect a ratio" in null.reason


def test_only_the_confirmation_seeds_and_instances_count():
    rows = bias_rows(plateau=100)
    # Exploration seeds and a third instance going the other way change nothing.
    noise = [row(s, 100, plateau=2000, config={"callbacks.attention_bias": {"strength": 5.0, "pattern": "predict"}})
             for s in (100, 101, 102, 103)]
    noise += [row(s, 7, plateau=2000, config={"callbacks.attention_bias": {"strength": 5.0, "pattern": "predict"}})
              for s in SEEDS]
    before = judge(rows, "bias-removes-plateau")["vs none"].outcome
    after = judge({**rows, "bias": rows["bias"] + noise}, "bias-removes-plateau")["vs none"].outcome
    assert (before.effect, before.p, before.n) == (after.effect, after.p, after.n)


def test_a_mixer_without_attention_reads_na_with_the_reason_and_a_missing_group_not_run():
    rows = {"emergence": confirmation(attention=False), "bias": []}
    card = judge_claims(rows, [CLAIMS.get("abrupt-with-attention"), CLAIMS.get("bias-removes-plateau")])
    assert [(r.verdict, r.reason) for r in card] == [
        ("n/a", "the mixer exposes no attention scores"),
        ("not run", "no confirmation rows in group(s) bias")]


def test_holm_adjusts_over_every_judged_claim():
    rows = {**bias_rows(plateau=150), "emergence": bias_rows(plateau=150)["emergence"]}
    card = judge_claims(rows, claims())
    raw = [r.outcome.p if r.outcome is not None and hasattr(r.outcome, "p") else None for r in card]
    assert [r.p_adjusted for r in card] == holm(raw)
    assert sum(p is not None for p in raw) >= 5  # the bias's three, seeds, abruptness, attention, ...


def test_abrupt_drops_after_a_plateau_agree_and_smooth_learning_curves_disagree():
    late = confirmation(plateau=800)
    assert cell(late, "abrupt").verdict == "agrees"
    smooth = [[0.69 * (1 + t / 30) ** -1.0] * 3 for t in STEPS]
    assert cell(confirmation(cells=smooth), "abrupt").verdict == "disagrees"


def test_an_attention_jump_with_the_loss_drop_coincides_and_one_long_after_does_not():
    rows = confirmation(plateau=600)
    assert cell(rows, "abrupt-with-attention").verdict == "agrees"
    for r in rows:  # the attention jumps at twice the loss's step
        r["attention_probe"]["history"] = [[t, 1 / (1 + math.exp(-(t - 1200) / 10)), 1.0] for t in STEPS]
    late = cell(rows, "abrupt-with-attention")
    assert late.verdict == "disagrees" and late.outcome.effect == pytest.approx(1.0, abs=0.1)


def test_the_independent_heads_fit_recovers_its_rate_and_rejects_a_falling_success():
    heads, trials = [1, 4, 8, 16, 64], [400] * 5
    p = 0.1
    exact = [round(n * (1 - (1 - p) ** h)) for h, n in zip(heads, trials)]
    fitted, statistic, p_value = independence_fit(heads, exact, trials)
    assert fitted == pytest.approx(p, abs=0.005) and p_value > 0.5
    _, _, rejected = independence_fit(heads, [300, 200, 100, 50, 10], trials)
    assert rejected < 1e-6


def test_seeds_differ_reads_the_spread_within_each_instance():
    spread = confirmation()
    for r in spread:  # emergence from 300 to 1,000, different on each seed, the same on both instances
        r["emergence"]["step"] = 300 + 100 * r["seed"]
    assert cell(spread, "seeds-differ").verdict == "agrees"
    same = confirmation()
    for r in same:  # each instance deterministic: the instance alone sets the step
        r["emergence"]["step"] = 400 + 300 * r["config"]["task"]["task_seed"]
    verdict = cell(same, "seeds-differ")
    assert verdict.verdict == "disagrees" and verdict.outcome.effect == pytest.approx(1.0)
    never = confirmation()
    for r in never:  # no run emerged: every step censored, so no spread was measured
        r["emergence"]["step"] = None
    assert "none of 16 runs emerged" in cell(never, "seeds-differ").reason


def test_the_preset_freezes_the_design_the_claims_read():
    sweep = load_sweep("claims-cpu-v2")
    assert sweep.grid["seed"] == list(SEEDS) and sweep.grid["task.task_seed"] == list(TASK_SEEDS)
    groups = {g.name: g for g in sweep.groups}
    first = [c for c in claims() if c.stage == "confirmation"]  # a replication has its own preset and seeds
    assert {group for c in first for group in c.groups} == set(groups)
    assert sweep.base["trainer"] == {"max_steps": 1500, "eval_every": 20, "eval_batches": 4}
    patterns = [b["pattern"] for b in groups["bias"].grid["callbacks.attention_bias"]]
    assert patterns == ["predict", "placebo", "near_miss"]
    assert [m["n_heads"] for m in groups["heads"].grid["mixer"]] == [1, 4, 16, 64]
    assert all(m["n_heads"] * m["head_dim"] == 64 for m in groups["heads"].grid["mixer"])
    assert groups["sparsity"].grid["task.sparsity"] == [1, 6, 11]
    assert groups["sparsity"].grid["task.blank_outputs"] == [False, True]
    assert groups["curricula"].base["trainer"]["max_steps"] + 300 == 1500  # matched total steps
    frozen = {c.id: dict(c.settings) for c in first}
    assert frozen["abrupt"]["abrupt_share"] == 0.25 and frozen["abrupt-with-attention"]["margin"] == 0.25
    assert frozen["seeds-differ"]["min_spread"] == 1.25 and frozen["few-heads"]["k"] == 4
    assert all(c.settings["seeds"] == SEEDS and c.settings["task_seeds"] == TASK_SEEDS for c in first)
    with pytest.raises(TypeError):
        CLAIMS.get("abrupt").settings["abrupt_share"] = 0.5  # type: ignore[index]


def test_the_command_writes_the_scorecard_and_refuses_an_empty_folder(tmp_path: Path):
    rows = bias_rows(plateau=100)
    for group, runs in rows.items():
        for r in runs:
            folder = tmp_path / "runs" / group / r["run_id"]
            folder.mkdir(parents=True)
            (folder / "result.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION, "error": None,
                                                             "backend": None, "device": None, "threads": 1,
                                                             "versions": {}, "started_at": "", **r}))
    command = [sys.executable, "-m", "emergence_bench", "claims", str(tmp_path / "runs"),
               "--claim", "bias-removes-plateau"]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("**agrees**") == 3
    assert "seeds-differ" not in done.stdout  # --claim prints its rows; the files hold every claim
    written = json.loads((tmp_path / "runs" / "claims.json").read_text())
    bias = [r for r in written if r["claim"].startswith("bias-removes-plateau")]
    assert [r["claim"] for r in bias] == ["bias-removes-plateau[vs none]", "bias-removes-plateau[vs placebo]",
                                          "bias-removes-plateau[vs near miss]"]
    assert len(written) > len(bias) and sum(r["p_holm"] is not None for r in written) > 3  # Holm over all
    assert (tmp_path / "runs" / "claims.csv").read_text().startswith("claim,")
    (tmp_path / "empty").mkdir()
    empty = subprocess.run([sys.executable, "-m", "emergence_bench", "claims", str(tmp_path / "empty")],
                           capture_output=True, text=True)
    assert empty.returncode != 0 and empty.stderr.strip().startswith("error:") and "no readable results" in empty.stderr


def test_the_report_draws_one_figure_per_judged_claim_with_the_scorecard_above(tmp_path: Path):
    from emergence_bench.reporting.figure import Results
    from emergence_bench.reporting.figures.claims import draw

    rows = bias_rows(plateau=100)
    for group, runs in rows.items():
        for r in runs:
            folder = tmp_path / group / r["run_id"]
            folder.mkdir(parents=True)
            (folder / "result.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION, **r}))
    drawn = draw(Results([], root=tmp_path))
    judged = [d.title for d in drawn]
    assert "Claim 5: bias-removes-plateau[vs placebo]" in judged and "Claim 1: seeds-differ" in judged
    assert "<table>" in drawn[0].html[0] and all(not d.html for d in drawn[1:])
    bias = next(d for d in drawn if d.title == "Claim 5: bias-removes-plateau[vs none]")
    assert [t.get_text() for t in bias.figure.axes[0].get_xticklabels()] == ["true bias", "none"]
    assert draw(Results([], root=tmp_path / "nothing")) == [] and draw(Results([])) == []


def test_a_claim_about_one_mixer_judges_each_mixer_in_the_rows_alone():
    transformer = confirmation()
    for r in transformer:
        r["emergence"]["step"] = 300 + 100 * r["seed"]
    plugin = [row(s, t, attention=False, config={"mixer": {"name": "my_mixer"}}) for s in SEEDS for t in TASK_SEEDS]
    for r in plugin:  # deterministic per instance: seeds do not differ
        r["emergence"]["step"] = 500
    card = {r.label: r for r in judge_claims({"emergence": transformer + plugin}, [CLAIMS.get("seeds-differ")])}
    assert set(card) == {"transformer", "my_mixer"}
    assert card["transformer"].verdict == "agrees" and card["my_mixer"].verdict == "disagrees"
    both = judge_claims({"emergence": transformer + plugin}, [CLAIMS.get("abrupt-with-attention")])
    assert {(r.label, r.verdict) for r in both} == {("my_mixer", "n/a"), ("transformer", "agrees")}


def test_medium_sparsity_needs_the_middle_above_both_ends_and_judges_the_blanked_control_apart():
    def sparsity_rows(losses: dict[tuple[int, bool], float]) -> list[dict[str, Any]]:
        return [row(seed, t, config={"task.sparsity": s, "task.blank_outputs": blank},
                    metrics={"final_eval_loss": loss + 0.001 * seed + 0.0005 * t})
                for (s, blank), loss in losses.items() for seed in SEEDS for t in TASK_SEEDS]

    paper = {(1, False): 0.0, (6, False): 0.4, (11, False): 0.06, (1, True): 0.0, (6, True): 0.5, (11, True): 0.69}
    card = {r.label: r for r in judge_claims({"sparsity": sparsity_rows(paper)}, [CLAIMS.get("medium-sparsity")])}
    assert card["S=12"].verdict == "agrees" and card["S=12"].outcome.effect == pytest.approx(0.34, abs=0.01)
    blanked = card["S=12, outputs blanked"]
    assert blanked.verdict == "inconclusive" and blanked.outcome.direction == 0 and "mixed" in blanked.reason


def test_curricula_compare_each_stage_task_with_no_curriculum():
    none = [row(s, t, emergence=800 + 10 * s) for s in SEEDS for t in TASK_SEEDS]
    stage = lambda task: [{"task": {"name": task}, "steps": 300}]  # noqa: E731
    dyck = [row(s, t, emergence=300 + 10 * s, config={"curriculum": stage("dyck")}) for s in SEEDS for t in TASK_SEEDS]
    nca = [row(s, t, emergence=900 + 10 * s, config={"curriculum": stage("neural_ca")})
           for s in SEEDS for t in TASK_SEEDS]
    judged = judge_claims({"emergence": none, "curricula": dyck + nca}, [CLAIMS.get("curricula")])
    card = {r.label: r.verdict for r in judged}
    assert card == {"after dyck": "agrees", "after neural_ca": "disagrees"}


def test_few_heads_reads_the_patched_fraction_and_brackets_emergence_between_adjacent_checkpoints():
    from emergence_bench.claims.patching import bracket

    assert bracket(row(0, emergence=500), [0, 20, 480, 500, 520]) == (480, 500)
    assert bracket(row(0, emergence=510), [0, 500, 520]) == (500, 520)
    assert bracket(row(0, emergence=None), [0, 500]) is None and bracket(row(0, emergence=20), [20, 40]) is None

    def patched(fractions: dict[int, float]) -> list[dict[str, Any]]:
        return [row(s, t, config={"model.n_layers": 2},
                    patching={"top_k": [{"k": k, "fraction_recovered": f + 0.01 * s} for k, f in fractions.items()],
                              "ground_truth": 0.1}) for s in SEEDS for t in TASK_SEEDS]

    most = cell({"patching": patched({1: 0.3, 4: 0.7, 16: 0.9})}, "few-heads")
    assert most.verdict == "agrees"
    assert "K=4 0.7" in most.outcome.details and "ground-truth pattern 0.10" in most.outcome.details
    assert cell({"patching": patched({1: 0.02, 4: 0.1, 16: 0.2})}, "few-heads").verdict == "disagrees"
    unpatched = cell({"patching": confirmation()}, "few-heads")
    assert unpatched.verdict == "n/a" and "were patched" in unpatched.reason


def test_the_trend_claims_read_their_arms_in_order_with_the_plain_twin_included():
    heads = [row(s, t, emergence=(None if h == 1 else 1000 // h + 10 * s),
                 config={"mixer": {"name": "transformer", "n_heads": h, "head_dim": 64 // h}})
             for h in (1, 4, 16, 64) for s in SEEDS for t in TASK_SEEDS]
    plain = [row(s, t, emergence=125 + 10 * s) for s in SEEDS for t in TASK_SEEDS]  # 8 × 8, from emergence
    more = cell({"heads": heads, "emergence": plain}, "more-heads")
    assert more.verdict == "agrees" and "H=1 >1500" in more.outcome.details and "H=8 1" in more.outcome.details
    assert list(more.outcome.data) == ["H=1", "H=4", "H=8", "H=16", "H=64"]
    assert cell({"heads": heads}, "head-dim-1").verdict == "agrees"
    depth = [row(s, t, emergence=300 * layers + 10 * s, config={"model.n_layers": layers})
             for layers in (2, 4) for s in SEEDS for t in TASK_SEEDS]
    assert cell({"depth": depth, "emergence": plain}, "depth-linear-map").verdict == "agrees"
    shallower = [{**r, "emergence": {"step": 200 // r["config"]["model"]["n_layers"] + r["seed"]}} for r in depth]
    assert cell({"depth": shallower, "emergence": plain}, "depth-linear-map").verdict == "disagrees"


def test_trails_transformer_gives_each_other_mixer_its_row_and_counts_the_transformer_once():
    transformer = [row(s, t, emergence=400 + 10 * s) for s in SEEDS for t in TASK_SEEDS]
    recurrent = [row(s, t, emergence=(900 if name == "mamba" else 100) + 10 * s, attention=False,
                     config={"mixer": {"name": name}})
                 for name in ("mamba", "rwkv7") for s in SEEDS for t in TASK_SEEDS]
    again = [row(s, t, emergence=400 + 10 * s) for s in SEEDS for t in TASK_SEEDS]  # --mixers transformer,...
    card = {r.label: r for r in judge_claims({"emergence": transformer, "recurrent": recurrent + again},
                                          [CLAIMS.get("trails-transformer")])}
    assert {label: r.verdict for label, r in card.items()} == {"mamba": "agrees", "rwkv7": "disagrees"}
    assert card["mamba"].outcome.n == "16 vs 16"


def test_the_trend_concordance_counts_every_later_arm_pair_ties_half_and_never_ranked_last():
    import itertools

    import numpy as np

    from emergence_bench.claims.compare import concordance

    arms = [[1.0, 5.0, math.inf], [2.0, 5.0], [math.inf, 0.5, 3.0]]
    above = pairs = 0.0
    for (i, a), (j, b) in itertools.combinations(enumerate(arms), 2):
        for x, y in itertools.product(a, b):  # y from the later arm
            above += 1.0 if y > x else 0.5 if y == x else 0.0
            pairs += 1
    assert concordance([np.array(a) for a in arms]) == pytest.approx(above / pairs)
    assert concordance([np.array([1.0, 2.0]), np.array([3.0, math.inf])]) == 1.0
