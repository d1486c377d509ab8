import math

import pytest
import torch

from emergence_bench.tasks.neural_ca import NeuralCA


def oracle_step(state: list[int], task: NeuralCA, rule: int) -> list[int]:
    """One transition cell by cell: the one-hot window through the rule's MLP, written as loops."""
    S, C, r, H = len(state), task.colors, task.radius, task.hidden
    out = []
    for i in range(S):
        onehot = [0.0] * ((2 * r + 1) * C)
        for k, offset in enumerate(range(-r, r + 1)):
            onehot[k * C + state[(i + offset) % S]] = 1.0
        hidden = [math.tanh(sum(onehot[f] * float(task.W1[rule, f, h]) for f in range(len(onehot)))
                            + float(task.b1[rule, h])) for h in range(H)]
        logits = [sum(hidden[h] * float(task.W2[rule, h, c]) for h in range(H)) + float(task.b2[rule, c])
                  for c in range(C)]
        out.append(max(range(C), key=lambda c: logits[c]))
    return out


def explaining_rules(task: NeuralCA, sequence: torch.Tensor) -> list[int]:
    """The pool rules under which every transition of ``sequence`` [S·T] holds (vectorised step)."""
    states = sequence.view(task.trajectory_length, task.state_size)
    rules = torch.arange(task.rules)
    found = torch.ones(task.rules, dtype=torch.bool)
    for t in range(task.trajectory_length - 1):
        following = task.step(states[t].expand(task.rules, -1), rules)
        found &= (following == states[t + 1]).all(dim=1)
    return found.nonzero().flatten().tolist()


def test_batch_shape_dtype_and_values():
    task = NeuralCA(state_size=6, colors=3, trajectory_length=5, rules=8, batch_size=7)
    tokens = task.batch("train", 0)
    assert tokens.shape == (7, 30) and tokens.dtype == torch.long and task.seq_len == 29
    assert tokens.min() >= 0 and tokens.max() < 3 and task.vocab_size == 3
    assert torch.equal(tokens, task.batch("train", 0)) and not torch.equal(tokens, task.batch("train", 1))
    assert NeuralCA(state_size=4, trajectory_length=4, tokens_per_batch=100).batch_size == 6


def test_step_matches_a_cell_by_cell_mlp():
    task = NeuralCA(state_size=7, colors=3, radius=2, hidden=5, rules=4)
    g = torch.Generator().manual_seed(0)
    state = torch.randint(0, 3, (6, 7), generator=g)
    rule = torch.randint(0, 4, (6,), generator=g)
    expected = [oracle_step(s, task, int(k)) for s, k in zip(state.tolist(), rule)]
    assert task.step(state, rule).tolist() == expected


def test_every_sequence_follows_one_rule_of_the_pool_and_the_rules_vary():
    task = NeuralCA(state_size=6, colors=3, rules=8, trajectory_length=10, batch_size=32)
    tokens = task.batch("train", 0)
    used = set()
    for sequence in tokens:
        found = explaining_rules(task, sequence)
        assert found  # a pool rule reproduces the whole trajectory
        used.add(found[0])
    assert len(used) >= 4
    # The rules are not degenerate: trajectories keep changing and use every colour.
    states = tokens.view(32, 10, 6)
    assert (states[:, 1:] != states[:, :-1]).any(dim=2).float().mean() > 0.3
    assert set(states[:, 1:].unique().tolist()) == {0, 1, 2}


def test_pool_depends_only_on_task_seed():
    a = NeuralCA(colors=3, rules=16, task_seed=1)
    b = NeuralCA(state_size=5, colors=3, rules=16, trajectory_length=4, task_seed=1, batch_size=8)
    c = NeuralCA(colors=3, rules=16, task_seed=2)
    for name in ("W1", "b1", "W2", "b2"):
        assert torch.equal(getattr(a, name), getattr(b, name))
        assert not torch.equal(getattr(a, name), getattr(c, name))
    assert a.W1.shape == (16, 9, 16) and a.W2.shape == (16, 16, 3)
    # Other data seeds and splits draw other sequences, all from the same pool.
    b.configure_streams(data_seed=7, eval_batches=1)
    for split, index in [("train", 0), ("eval", 0)]:
        for sequence in b.batch(split, index):
            assert explaining_rules(b, sequence)


@pytest.mark.parametrize("radius", [0, 1])
def test_ground_truth_matches_brute_force_with_next_token_shift(radius):
    """Change one cell of state t and recompute state t+1 with every rule of the pool: cells outside
    the window never change the next cell, and each cell inside it does for some state and rule."""
    S, C, T = 5, 3, 3
    task = NeuralCA(state_size=S, colors=C, radius=radius, rules=16, trajectory_length=T, batch_size=16)
    tokens = task.batch("train", 0)
    L = task.seq_len
    states = tokens.view(-1, T, S)
    rules = torch.arange(16).repeat_interleave(16)  # every sequence's states under every rule
    ever_changed = torch.zeros(L + 1, L + 1, dtype=torch.bool)  # [source token, changed token]
    for t in range(T - 1):
        state = states[:, t].repeat(16, 1)
        following = task.step(state, rules)
        for cell in range(S):
            for shift in range(1, C):
                changed_state = state.clone()
                changed_state[:, cell] = (changed_state[:, cell] + shift) % C
                changed = task.step(changed_state, rules) != following  # [16·B, S]
                ever_changed[t * S + cell, (t + 1) * S : (t + 2) * S] |= changed.any(dim=0)
    brute_force = ever_changed[:L, 1:].T.long()  # row p predicts token p + 1
    pattern = task.ground_truth_attention()
    assert torch.equal(pattern, brute_force)
    assert pattern[~task.loss_mask].sum() == 0 and (pattern.triu(1) == 0).all()
    assert (pattern.sum(dim=1)[task.loss_mask] == 2 * radius + 1).all()


def test_next_token_shift_of_mask_and_cells():
    task = NeuralCA(state_size=3, trajectory_length=3, rules=2)
    assert task.loss_mask.tolist() == [False] * 2 + [True] * 6
    assert task.output_cell.tolist() == [-1, -1, 0, 1, 2, 0, 1, 2]
    assert task.chance_loss == pytest.approx(math.log(4))
    # Early tokens are uncertain until the sequence reveals its rule: the Bayes floor is positive.
    assert 0 < task.floor_loss < task.chance_loss and task.max_accuracy < 1


@pytest.mark.parametrize("radius, colors", [(0, 3), (1, 3), (2, 2)])
def test_rule_tables_reproduce_step(radius, colors):
    """Each network rule as a lookup table over window codes gives the same next state as the
    network, for every rule of the pool."""
    task = NeuralCA(state_size=6, colors=colors, radius=radius, hidden=8, rules=12)
    tables = task.rule_tables()
    assert tables.shape == (12, colors ** (2 * radius + 1)) and tables.dtype == torch.long
    g = torch.Generator().manual_seed(0)
    state = torch.randint(0, colors, (12 * 20, 6), generator=g)
    rule = torch.arange(12).repeat_interleave(20)
    looked_up = tables[rule[:, None], task.window_index(state)]  # [240, 6]
    assert torch.equal(looked_up, task.step(state, rule))
    assert len(tables.unique()) == colors  # the rules use every colour


def test_named_patterns_are_the_cellular_automata_ones():
    from emergence_bench.tasks.cellular_automata import CellularAutomata

    ca = CellularAutomata(state_size=5, colors=3, radius=1, rules=2, trajectory_length=3)
    task = NeuralCA(state_size=5, colors=3, radius=1, rules=2, trajectory_length=3)
    for name in ("predict", "own"):
        assert torch.equal(task.pattern(name), ca.pattern(name))

