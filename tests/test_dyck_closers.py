"""Dyck scored on its closers (``score: closers``): which rows are scored, the facts a threshold is
derived from (checked against every sequence the generator can produce), the run end to end, and
seed-parallel against sequential runs. ``score: all`` stays ladder v2's: its run ids do not change."""

from __future__ import annotations

import json
import math

import pytest
import torch

from emergence_bench.callbacks.emergence import effective_threshold
from emergence_bench.callbacks.plateau import Plateau
from emergence_bench.config import resolve
from emergence_bench.engine.module import EvalTally
from emergence_bench.engine.run import run
from emergence_bench.engine.seed_parallel import run_seed_parallel
from emergence_bench.engine.training import scored_rows, sequence_mask, train_losses
from emergence_bench.tasks.dyck import Dyck

BRACKETS = {"(": 0, "[": 1, ")": 2, "]": 3}  # k = 2: openers 0, 1; their closers 2, 3


def encode(*strings: str) -> torch.Tensor:
    return torch.tensor([[BRACKETS[c] for c in s] for s in strings])


def one_hot_logits(predicted: torch.Tensor, vocab: int) -> torch.Tensor:
    """predicted [B, L] token ids -> logits [1, B, L, V] whose argmax they are (one seed)."""
    return (torch.nn.functional.one_hot(predicted, vocab).float() * 10.0).unsqueeze(0)


# --- which rows are scored ------------------------------------------------------------------------
def test_closers_mark_the_rows_whose_target_closes_a_bracket():
    task = Dyck(bracket_types=2, max_depth=2, length=6, score="closers")
    tokens = encode("([])()", "(())[]")
    # row p predicts token p + 1: "([])()" -> targets "[])()", closers at rows 1, 2, 4
    expected = torch.tensor([[False, True, True, False, True], [False, True, True, False, True]])
    assert torch.equal(task.scored_mask(tokens), expected)
    assert torch.equal(sequence_mask(task, tokens), expected)
    assert task.per_sequence_scoring and task.loss_mask.all()  # max_depth 2: any row may close


def test_all_scoring_is_unchanged_and_scores_every_row():
    task = Dyck(bracket_types=2, max_depth=2, length=6)
    tokens = encode("([])()")
    assert task.score == "all" and not task.per_sequence_scoring
    assert sequence_mask(task, tokens) is None  # the fixed path: scored_rows, by index
    assert task.scored_mask(tokens).all() and task.loss_mask.all()
    assert torch.equal(task.output_cell, torch.arange(5))


def test_max_depth_one_scores_only_the_rows_that_can_close():
    task = Dyck(bracket_types=2, max_depth=1, length=8, score="closers")
    assert task.loss_mask.tolist() == [True, False, True, False, True, False, True]
    assert task.output_cell.tolist() == [0, -1, 1, -1, 2, -1, 3]
    tokens = task.batch("eval", 0)
    assert not (task.scored_mask(tokens) & ~task.loss_mask).any()
    assert task.shortcut_loss == pytest.approx(0.0) and task.shortcut_accuracy == pytest.approx(1.0)


def test_bad_score_is_named():
    with pytest.raises(ValueError, match="score must be one of all, closers"):
        Dyck(score="openers")


def tally(task: Dyck, tokens: torch.Tensor, predicted: torch.Tensor):
    t = EvalTally(task, 1, torch.device("cpu"))
    t.add(one_hot_logits(predicted, task.vocab_size), tokens[:, 1:], sequence_mask(task, tokens))
    return t.results(0)[0]


def test_a_perfect_model_scores_one_and_an_opener_model_zero_on_closers():
    task = Dyck(bracket_types=2, max_depth=2, length=6, score="closers")
    tokens = encode("([])()", "(())[]")
    perfect = tally(task, tokens, tokens[:, 1:])
    assert perfect.accuracy == 1.0 and perfect.full_sequence_accuracy == 1.0
    assert perfect.loss == pytest.approx(0.0, abs=1e-3)
    openers = tally(task, tokens, torch.zeros_like(tokens[:, 1:]))  # always "("
    assert openers.accuracy == 0.0
    # targets "[])()" and "())[]": "(" right at row 3 of the first, rows 0 of the second
    assert openers.full_sequence_accuracy == pytest.approx(2 / 10)
    # per output cell (one row each here): the closers of rows 1, 2, 4; rows 0 and 3 hold no closer
    assert perfect.cell_accuracy[[1, 2, 4]].tolist() == [1.0, 1.0, 1.0]
    assert torch.isnan(perfect.cell_accuracy[[0, 3]]).all()


def test_the_step_loss_is_the_mean_over_each_sequences_closers():
    task = Dyck(bracket_types=2, max_depth=2, length=6, score="closers")
    tokens = encode("([])()", "(())[]")
    logits = torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(0))
    mask = task.scored_mask(tokens)
    scored, full = train_losses(logits, tokens[:, 1:], scored_rows(task), "scored", mask)
    per_row = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
    assert scored.item() == pytest.approx(per_row[mask.flatten()].mean().item(), rel=1e-6)
    assert full.item() == pytest.approx(per_row.mean().item(), rel=1e-6)


# --- the facts thresholds come from ---------------------------------------------------------------
def test_facts_and_thresholds():
    task = Dyck(bracket_types=4, max_depth=8, length=64, score="closers")
    assert task.max_accuracy == 1.0 and task.floor_loss == 0.0
    assert task.chance_loss == pytest.approx(math.log(4))
    assert 0 < task.shortcut_loss < task.chance_loss
    assert effective_threshold(0.95, True, task) == pytest.approx(0.95)
    assert task.shortcut_accuracy < 0.95  # emergence is more than the bag of brackets reaches
    plateau = Plateau(task, frac=0.1)
    assert plateau.threshold == pytest.approx(0.9 * task.shortcut_loss)  # min(chance, shortcut) − 10%
    assert not plateau.measures_shortcut
    every = Dyck(bracket_types=4, max_depth=8, length=64)
    assert every.shortcut_loss is None and every.chance_loss == pytest.approx(math.log(8))
    assert every.max_accuracy < 1 and every.floor_loss > 0


def every_sequence(length: int, k: int, max_depth: int, p: float):
    """(tokens, probability) of every sequence the generator can produce, by its rules."""
    out = []

    def walk(prefix: list[int], stack: list[int], prob: float) -> None:
        i = len(prefix)
        if i == length:
            out.append((prefix, prob))
            return
        depth, remaining = len(stack), length - i
        can_open = depth < max_depth and depth + 2 <= remaining
        can_close = depth > 0
        p_open = (p if can_close else 1.0) if can_open else 0.0
        if p_open:
            for t in range(k):
                walk(prefix + [t], stack + [t], prob * p_open / k)
        if p_open < 1:
            walk(prefix + [k + stack[-1]], stack[:-1], prob * (1 - p_open))

    walk([], [], 1.0)
    return out


def bag_prediction(prefix: list[int], k: int) -> tuple[list[float], list[int]]:
    """The bag of brackets on a prefix: (probability per closer type, the types it ties on)."""
    counts = [0] * k
    for token in prefix:
        counts[token % k] += 1 if token < k else -1
    depth = sum(counts)
    best = max(counts)
    return [c / depth for c in counts], [j for j in range(k) if counts[j] == best]


@pytest.mark.parametrize("length,k,max_depth,p", [(6, 2, 8, 0.5), (8, 2, 3, 0.3), (8, 2, 2, 0.7), (8, 3, 8, 0.5)])
def test_closer_facts_against_every_sequence(length, k, max_depth, p):
    task = Dyck(bracket_types=k, max_depth=max_depth, length=length, open_prob=p, score="closers")
    sequences = every_sequence(length, k, max_depth, p)
    assert sum(prob for _, prob in sequences) == pytest.approx(1.0)
    tokens = torch.tensor([s for s, _ in sequences])
    mask = task.scored_mask(tokens)
    # scored rows are exactly the closers, the last token always one, and loss_mask their union
    assert torch.equal(mask, tokens[:, 1:] >= k) and mask[:, -1].all()
    assert torch.equal(task.loss_mask, mask.any(0))
    # each closer's true source (ground_truth_for) sits on a scored row: the matching pattern decides it
    truth = task.ground_truth_for(tokens)
    assert torch.equal(truth.sum(-1) > 0, mask)
    closers = loss = accuracy = 0.0
    for (sequence, prob), row_mask in zip(sequences, mask.tolist()):
        for row, is_scored in enumerate(row_mask):
            if not is_scored:
                continue
            prefix, target = sequence[: row + 1], sequence[row + 1] - k
            probs, ties = bag_prediction(prefix, k)
            closers += prob
            loss += prob * -math.log(probs[target])
            accuracy += prob * (target in ties) / len(ties)
    assert loss / closers == pytest.approx(task.shortcut_loss, rel=1e-12)
    assert accuracy / closers == pytest.approx(task.shortcut_accuracy, rel=1e-12)
    # the matching predictor (a closer's type is its opener's) is right on every closer: max_accuracy
    # 1 and floor 0 are reached; and the shortcut is no better than that, no worse than chance
    assert task.max_accuracy == 1.0 and task.floor_loss == 0.0
    assert 0 <= task.shortcut_loss <= task.chance_loss


# --- run ids and runs -------------------------------------------------------------------------------
def test_run_ids_of_score_all_are_the_ones_before_the_option():
    base = {"task": {"name": "dyck", "bracket_types": 2, "length": 16}}
    assert resolve(base).run_id() == "dyck-transformer-seed0-ef72d3e3c2"
    assert resolve({"task": {**base["task"], "score": "all"}}).run_id() == "dyck-transformer-seed0-ef72d3e3c2"
    stage = {"curriculum": [{"task": {"name": "dyck", "bracket_types": 2, "length": 16}, "steps": 300}]}
    assert resolve(stage).run_id() == "linear_map-transformer-seed0-1250aa4300"
    assert resolve(base).to_dict()["task"]["score"] == "all"  # saved in the config all the same
    closers = resolve({"task": {**base["task"], "score": "closers"}})
    assert closers.run_id() != resolve(base).run_id()


def closers_config(tiny_config, **sections):
    return tiny_config(task={"name": "dyck", "bracket_types": 2, "max_depth": 4, "length": 16,
                             "batch_size": 16, "score": "closers"}, **sections)


def test_a_closers_run_trains_from_the_command_line_and_writes_the_new_metrics(tmp_path, cli, tiny_config):
    import yaml

    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(closers_config(tiny_config)))
    result = cli("run", "--config", config, "--out", tmp_path / "runs")
    assert result.returncode == 0, result.stderr
    (path,) = (tmp_path / "runs").glob("*/result.json")
    row = json.loads(path.read_text())
    assert row["status"] == "ok" and row["config"]["task"]["score"] == "closers"
    metrics, facts = row["metrics"], row["task_facts"]
    assert 0 <= metrics["final_eval_accuracy"] <= 1 and 0 <= metrics["final_eval_full_sequence_accuracy"] <= 1
    assert metrics["final_eval_full_sequence_loss"] > 0
    assert facts["max_accuracy"] == 1.0 and facts["floor_loss"] == 0.0
    assert facts["chance_loss"] == pytest.approx(math.log(2)) and facts["shortcut_loss"] > 0
    assert row["emergence"]["threshold"] == pytest.approx(0.95)


def test_seed_parallel_matches_sequential_runs_on_closers(tmp_path, tiny_config):
    from test_seed_parallel import MEASURED, assert_same_row

    configs = [closers_config(tiny_config, seed=seed, trainer={"log_every": 5}, callbacks=MEASURED) for seed in (0, 1)]
    rows = run_seed_parallel(configs, tmp_path / "parallel")
    for config, row in zip(configs, rows):
        assert row["seed_parallel"]["k"] == 2 and row["status"] == "ok"
        assert_same_row(row, run(config, tmp_path / "sequential"))
