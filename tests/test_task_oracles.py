"""The window tasks' Bayes oracle (max_accuracy, floor_loss) and count shortcut (shortcut_loss),
against brute-force enumeration and hand computation."""

import itertools
import math

import pytest
import torch
from test_cellular_automata import oracle_step  # one transition, cell by cell

from emergence_bench.tasks.cellular_automata import COUNT_ALPHAS, CellularAutomata
from emergence_bench.tasks.neural_ca import NeuralCA


def every_sequence(task) -> list[list[int]]:
    """Every (initial state, pool rule) pair's whole sequence, each equally likely."""
    tables = task.rule_tables().tolist()
    sequences = []
    for x0 in itertools.product(range(task.colors), repeat=task.state_size):
        for table in tables:
            states = [list(x0)]
            for _ in range(task.trajectory_length - 1):
                states.append(oracle_step(states[-1], table, task.colors, task.radius))
            sequences.append(sum(states, []))
    return sequences


def bayes_by_enumeration(task, sequences: list[list[int]]) -> tuple[float, float]:
    """Bayes greedy accuracy (ties to the lowest colour) and loss over the scored tokens: the
    predictive of token k is the share of equally likely sequences with the same first k tokens
    that continue with each colour."""
    correct, loss, n = 0, 0.0, 0
    for seq in sequences:
        for k in range(task.state_size, len(seq)):
            matching = [other[k] for other in sequences if other[:k] == seq[:k]]
            counts = [matching.count(c) for c in range(task.colors)]
            guess = max(range(task.colors), key=lambda c: (counts[c], -c))
            correct += guess == seq[k]
            loss -= math.log(counts[seq[k]] / len(matching))
            n += 1
    return correct / n, loss / n


TINY = [
    lambda: CellularAutomata(state_size=3, colors=2, radius=1, rules=3, trajectory_length=3, task_seed=0),
    lambda: CellularAutomata(state_size=4, colors=2, radius=1, rules=4, trajectory_length=2, task_seed=1),
    lambda: CellularAutomata(state_size=3, colors=3, radius=1, rules=2, trajectory_length=2, task_seed=2),
    lambda: NeuralCA(state_size=3, colors=2, radius=1, hidden=4, rules=4, trajectory_length=3, task_seed=0),
]


@pytest.mark.parametrize("make", TINY)
def test_oracle_matches_brute_force_enumeration(make):
    task = make()
    sequences = every_sequence(task)
    accuracy, loss = bayes_by_enumeration(task, sequences)
    p_true, p_max = task.bayes_oracle(torch.tensor(sequences))
    assert p_true.shape == p_max.shape == (len(sequences), task.state_size * (task.trajectory_length - 1))
    assert float(p_max.mean()) == pytest.approx(accuracy, abs=1e-12)
    assert float(-p_true.log().mean()) == pytest.approx(loss, abs=1e-12)
    assert 0 < loss and accuracy < 1  # a few rules share windows' outputs: not a trivial case
    # The task's own estimate, on its seeded sample of sequences, is close to the exact values.
    assert task.max_accuracy == pytest.approx(accuracy, abs=0.03)
    assert task.floor_loss == pytest.approx(loss, abs=0.03)


def test_oracle_is_lazy_cached_and_independent_of_the_data_seed():
    task = CellularAutomata(state_size=4, rules=16, trajectory_length=4)
    assert task._oracle_cache is None  # constructing a task (validating a config) runs no oracle
    stats = task.oracle_statistics()
    assert task.oracle_statistics() is stats
    other = CellularAutomata(state_size=4, rules=16, trajectory_length=4)
    other.configure_streams(data_seed=5, eval_batches=1)
    assert torch.equal(task.oracle_sequences(), other.oracle_sequences())
    assert other.max_accuracy == task.max_accuracy


def test_count_model_by_hand():
    tokens = torch.tensor([[0, 1, 0, 1, 1, 0]])  # S = 3, C = 2: tokens 3, 4, 5 are scored
    loss = CellularAutomata.count_model_loss(tokens, colors=2, first=3, alpha=1.0)
    # Token 3 (=1) after [0,1,0]: (1+1)/(3+2); token 4 (=1) after [0,1,0,1]: (2+1)/(4+2);
    # token 5 (=0) after [0,1,0,1,1]: (2+1)/(5+2).
    expected = [-math.log(2 / 5), -math.log(3 / 6), -math.log(3 / 7)]
    assert loss[0].tolist() == pytest.approx(expected)
    loss = CellularAutomata.count_model_loss(tokens, colors=3, first=3, alpha=0.5)
    assert loss[0].tolist() == pytest.approx([-math.log(1.5 / 4.5), -math.log(2.5 / 5.5), -math.log(2.5 / 6.5)])


def test_shortcut_loss_is_the_best_count_model_on_the_oracle_sequences():
    task = CellularAutomata(state_size=3, colors=3, rules=8, trajectory_length=4)
    tokens = task.oracle_sequences()
    losses = [float(task.count_model_loss(tokens, 3, 3, a).mean()) for a in COUNT_ALPHAS]
    assert task.shortcut_loss == pytest.approx(min(losses)) and min(losses) < task.chance_loss
    assert task.oracle_statistics()["shortcut_alpha"] == COUNT_ALPHAS[losses.index(min(losses))]


def test_shortcut_loss_is_never_above_chance():
    """Short trajectories of near-uniform colours: every α of the count model loses to a uniform
    guess, which needs no pattern either, so the shortcut is the chance loss."""
    task = CellularAutomata(state_size=5, colors=3, rules=8, trajectory_length=4)
    tokens = task.oracle_sequences()
    assert min(float(task.count_model_loss(tokens, 3, 5, a).mean()) for a in COUNT_ALPHAS) > task.chance_loss
    assert task.shortcut_loss == task.chance_loss and task.oracle_statistics()["shortcut_alpha"] is None


def test_paper_setting_orders_the_losses_and_matches_the_issue_count_model():
    """C=4, r=1, 256 rules, T=16, S=4: the count model's 1.247 (issue 11, its smoothing) is near
    ours at the best α; the Bayes floor is far below it and the accuracy just under 1."""
    task = CellularAutomata(state_size=4)
    assert 0 < task.floor_loss < task.shortcut_loss < 1.3 < task.chance_loss
    assert task.shortcut_loss == pytest.approx(1.247, abs=0.02)
    assert 0.9 < task.max_accuracy < 1
