"""The language family's Part-1 claims, judged on constructed analysis rows with known answers: seeds
that spread against seeds that agree, an induction head that jumps at the emergence against a smooth
or a misplaced rise, one head that recovers the gap against every head, too few seeds, nothing
analysed; and the declaration, frozen by its hash before the family trained."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Callable

import numpy as np

from emergence_bench.analysis.lm_family import checkpoint_steps
from emergence_bench.claims import family_preregistration
from emergence_bench.claims.family_design import PROBE
from emergence_bench.claims.family_heads import HEADS_JUMP
from emergence_bench.claims.family_judge import judge_family, scorecard
from emergence_bench.claims.family_patching import FEW_HEADS, fewest_heads
from emergence_bench.claims.family_seeds import SEEDS_DIFFER
from emergence_bench.cli import main as cli_main
from emergence_bench.results.store import without_non_finite

STEPS = checkpoint_steps(3000, 4)  # the family's log-spaced checkpoints, 4 a doubling
HEADS = 16  # 2 layers × 8
SPREAD = tuple(round(250 * 1.17**i) for i in range(16))  # sixteen seeds' emergence steps, 250 to 2,634

Score = Callable[[int], float]  # the top induction head's score at a step


def abrupt(at: float) -> Score:
    """A head held at the diffuse 0.02, then a logistic rise to 0.62 starting near ``at``."""
    return lambda step: 0.02 + 0.6 / (1 + math.exp(-(step - 1.1 * at) / (0.02 * at)))


def smooth(step: int) -> float:
    """A head that rises from the first step on, as a power law, to the same height."""
    return 0.02 + 0.6 * (1 - (1 + step / 200) ** -1.0)


def slow(at: float) -> Score:
    """A head that starts rising near ``at`` as well, but slowly: a ramp over two doublings."""
    return lambda step: 0.02 + 0.6 * min(1.0, max(0.0, (step - 0.7 * at) / (2.1 * at)))


def patched_by(heads_for_most: int | None) -> dict[str, Any]:
    """A patching report in which the top K heads recover 0.9 of the gap from K = ``heads_for_most``
    on, and 0.3 before (None: no K reaches 0.8)."""
    def fraction(k: int) -> float:
        return 0.9 if heads_for_most is not None and k >= heads_for_most else 0.3
    return {"top_k": [{"k": k, "fraction_recovered": fraction(k)} for k in range(1, HEADS + 1)],
            "all_heads": {"k": HEADS, "fraction_recovered": fraction(HEADS)}}


def family_row(seed: int, emerged_at: float | None, head: Score | None = None,
               patching: dict[str, Any] | None = None, **task: Any) -> dict[str, Any]:
    """One seed's ``lm-family analyze`` row of the declared probe: solved from the first checkpoint at
    or after ``emerged_at`` (None: never), its top induction head (layer 1, head 3) scoring ``head``
    (default: diffuse throughout), a little seeded noise on every score."""
    first = next(s for s in STEPS if s >= emerged_at) if emerged_at is not None else None
    noise = np.random.default_rng(seed)
    history = []
    for step in STEPS:
        grid = (0.02 + 0.002 * noise.standard_normal((2, 8))).tolist()
        grid[1][3] = (head or (lambda s: 0.02))(step) + 0.002 * noise.standard_normal()
        history.append([step, {"induction": grid, "previous_token": [[0.06] * 8] * 2}])
    config_task = {"name": "language_probe", "probe": PROBE, "prompts": 64, "single": False, "probe_seed": 0,
                   "threshold": 0.5, "lexicon": "shakespeare", **task}
    return {"status": "ok", "seed": seed, "run_id": f"pythia-{seed}",
            "config": {"seed": seed, "task": config_task, "mixer": {"name": "pythia"}},
            "emergence": {"first_solved": first, "censored": first is None,
                          "last_unsolved": None if first is None else STEPS[STEPS.index(first) - 1]},
            "head_scores": {"history": history},
            "patching": patching or {"skipped": "no bracketing pair: never solved"}}


def verdicts(rows: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    return {row.claim.id: (row.verdict, row.reason) for row in judge_family(rows)}


def test_seeds_that_spread_agree_and_seeds_that_emerge_together_disagree():
    spread = verdicts([family_row(seed, step) for seed, step in enumerate(SPREAD)])
    assert spread["family-seeds-differ"][0] == "agrees"
    together = verdicts([family_row(seed, 1000) for seed in range(16)])
    assert together["family-seeds-differ"][0] == "disagrees"


def test_a_seed_that_never_emerged_ranks_last_and_the_floor_is_the_widest_bracket():
    rows = [family_row(seed, step) for seed, step in enumerate(SPREAD[:5])] + [family_row(s, None) for s in (5, 6, 7)]
    (outcome,) = SEEDS_DIFFER.evaluate({"lm-family": rows}, SEEDS_DIFFER.settings).values()
    assert math.isinf(outcome.effect) and outcome.direction == 1  # q75 is a seed that never emerged
    assert "5/8 emerged" in outcome.details and "seed 7 never" in outcome.details
    assert "floor 1.49 = 1.25 × the widest bracket 1.19" in outcome.details  # 4 checkpoints a doubling


def test_a_head_that_jumps_at_the_emergence_agrees_a_smooth_slow_or_misplaced_rise_disagrees():
    at_emergence = [family_row(seed, step, abrupt(0.9 * step)) for seed, step in enumerate(SPREAD)]
    assert verdicts(at_emergence)["family-heads-jump"][0] == "agrees"
    smoothly = [family_row(seed, step, smooth) for seed, step in enumerate(SPREAD)]
    assert verdicts(smoothly)["family-heads-jump"][0] == "disagrees"
    slowly = [family_row(seed, step, slow(step)) for seed, step in enumerate(SPREAD)]
    found = judge_family(slowly)[1]  # its onset is near the emergence: only the rule tells it from a jump
    assert found.verdict == "disagrees" and found.outcome.details.count("no abrupt rise") >= 14
    three_octaves_early = [family_row(seed, step, abrupt(step / 8)) for seed, step in enumerate(SPREAD)]
    found = judge_family(three_octaves_early)[1]
    assert found.verdict == "disagrees" and "outside the window" in found.outcome.details


def test_one_head_recovering_the_gap_agrees_and_needing_every_head_disagrees():
    one = [family_row(seed, step, patching=patched_by(1)) for seed, step in enumerate(SPREAD)]
    assert verdicts(one)["family-few-heads"][0] == "agrees"
    every = [family_row(seed, step, patching=patched_by(HEADS)) for seed, step in enumerate(SPREAD)]
    assert verdicts(every)["family-few-heads"][0] == "disagrees"
    assert fewest_heads(patched_by(3), 0.8) == 4 and fewest_heads(patched_by(None), 0.8) is None  # K = 1, 2, 4, …


def test_fewer_seeds_than_declared_give_the_numbers_and_no_verdict():
    rows = [family_row(seed, step, abrupt(0.9 * step), patched_by(1)) for seed, step in enumerate(SPREAD[:3])]
    card = judge_family(rows)
    assert [row.verdict for row in card] == ["inconclusive"] * 3
    assert all("3 seed(s): a verdict needs at least 4" in row.reason for row in card)
    assert all(row.outcome.effect is not None and row.p_adjusted is None for row in card)  # numbers, out of Holm


def test_nothing_emerged_nothing_analysed_or_another_measurement_gives_no_verdict():
    never = judge_family([family_row(seed, None) for seed in range(8)])
    assert [row.verdict for row in never] == ["inconclusive"] * 3 and "no seed of 8 emerged" in never[0].reason
    assert {row.verdict for row in judge_family([])} == {"not run"}
    other = judge_family([family_row(seed, 1000, prompts=4) for seed in range(8)])
    assert {row.verdict for row in other} == {"not run"} and "on 4 prompts" in other[0].reason


def test_the_scorecard_records_its_declaration_and_writes_as_json():
    card = scorecard([family_row(seed, step) for seed, step in enumerate(SPREAD)])
    assert card["declaration"] == "as committed"
    assert card["declared_sha256"] == json.loads(family_preregistration.path().read_text())["sha256"]
    assert [row["claim"] for row in card["rows"]] == ["family-seeds-differ", "family-heads-jump", "family-few-heads"]
    json.dumps(without_non_finite(card)[0], allow_nan=False)


def test_the_declaration_still_matches_the_hash_committed_before_the_family_trained():
    problem = family_preregistration.check()
    assert problem is None, problem


def test_a_changed_setting_fails_and_says_the_claims_were_declared_before_the_family_trained(monkeypatch):
    wider = replace(HEADS_JUMP, settings=MappingProxyType({**HEADS_JUMP.settings, "window_octaves": 2.0}))
    monkeypatch.setattr(family_preregistration, "DECLARED", (SEEDS_DIFFER, wider, FEW_HEADS))
    problem = family_preregistration.check() or ""
    assert "declared before the family's seeds trained" in problem and "claim family-heads-jump: settings" in problem


def test_analyze_says_a_folder_without_a_family_holds_none(tmp_path, capsys):
    assert cli_main(["lm-family", "analyze", str(tmp_path)]) == 2
    assert "holds no family" in capsys.readouterr().err
