import itertools
import math

import pytest
import torch

from emergence_bench.tasks.linear_map import BLANK, LinearMap


def test_matrix_has_sparsity_ones_per_row_and_depends_only_on_task_seed():
    a, b, c = LinearMap(8, 3, task_seed=1), LinearMap(8, 3, task_seed=1), LinearMap(8, 3, task_seed=2)
    assert (a.A.sum(dim=1) == 3).all()
    assert torch.equal(a.A, b.A) and not torch.equal(a.A, c.A)


def test_trajectory_follows_the_map():
    task = LinearMap(6, 2, trajectory_length=4)
    tokens = task.batch("train", 0)
    assert tokens.shape == (task.batch_size, 24) and task.seq_len == 23
    states = tokens.view(-1, 4, 6)
    for t in range(3):
        assert torch.equal(states[:, t + 1], (states[:, t] @ task.A.T) % 2)


@pytest.mark.parametrize("T", [2, 3])
def test_ground_truth_matches_brute_force_with_next_token_shift(T):
    """Flip one cell of state t: exactly the tokens whose predicting row marks that cell change."""
    task = LinearMap(6, 3, trajectory_length=T, batch_size=1)
    S, L = 6, task.seq_len
    pattern = task.ground_truth_attention()
    g = torch.Generator().manual_seed(0)
    x0 = torch.randint(0, 2, (1, S), generator=g)
    for t in range(T - 1):
        for cell in range(S):
            states = [x0]
            for _ in range(T - 1):
                states.append((states[-1] @ task.A.T) % 2)
            flipped = [s.clone() for s in states]
            flipped[t][0, cell] ^= 1
            flipped[t + 1] = (flipped[t] @ task.A.T) % 2  # only the next state, directly
            changed = (torch.cat(flipped, 1) != torch.cat(states, 1))[0]
            source = t * S + cell
            for p in range(L):  # row p predicts token p + 1
                if p + 1 >= (t + 1) * S and p + 1 < (t + 2) * S:
                    assert bool(pattern[p, source]) == bool(changed[p + 1]), (t, cell, p)
    # Rows that predict unscored tokens, and every key at or after the row, are zero.
    assert pattern[~task.loss_mask].sum() == 0
    assert (pattern.triu(1) == 0).all()
    assert (pattern.sum(dim=1)[task.loss_mask] == 3).all()


def test_next_token_shift_of_mask_and_cells():
    task = LinearMap(4, 2, trajectory_length=3)
    # Tokens 4..11 are scored; row p predicts token p + 1.
    assert task.loss_mask.tolist() == [False] * 3 + [True] * 8
    assert task.output_cell.tolist() == [-1, -1, -1, 0, 1, 2, 3, 0, 1, 2, 3]
    assert task.num_cells == 4
    assert task.chance_loss == pytest.approx(0.693147, abs=1e-5) and task.floor_loss == 0


def test_streams_are_deterministic_and_distinct():
    task = LinearMap(8, 3)
    assert torch.equal(task.batch("train", 5), task.batch("train", 5))
    assert not torch.equal(task.batch("train", 5), task.batch("train", 6))
    assert not torch.equal(task.batch("train", 0), task.batch("eval", 0))
    eval_before = task.batch("eval", 0)
    train_before = task.batch("train", 0)
    task.configure_streams(data_seed=7, eval_batches=2)
    assert not torch.equal(task.batch("train", 0), train_before)  # each seed its own stream
    assert torch.equal(task.batch("eval", 0), eval_before)  # every seed scored on the same set


def same_state_entropy(task: LinearMap, state: int) -> list[float]:
    """Per cell i of state ``state``, H(x[i] | x[<i]) in nats over every x0 (each equally likely),
    the state reached by applying the map step by step."""
    S = task.state_size
    x = torch.tensor(list(itertools.product([0, 1], repeat=S)))  # [2^S, S]: every x0
    for _ in range(state):
        x = (x @ task.A.T) % 2
    entropies = []
    for i in range(S):
        groups: dict[tuple, list[int]] = {}
        for row in x.tolist():
            groups.setdefault(tuple(row[:i]), []).append(row[i])
        h = 0.0
        for values in groups.values():
            for v in (0, 1):
                p = values.count(v) / len(values)
                h -= len(values) / len(x) * p * math.log(p) if p else 0.0
        entropies.append(h)
    return entropies


def test_shortcut_cells_match_brute_force():
    """A cell is a shortcut exactly when it is a function of the earlier cells of its state (zero
    conditional entropy); otherwise it is a fair coin given them (ln 2). shortcut_loss is the mean."""
    some_shortcut = some_without = False
    cases = [(S, s) for S in (3, 4, 5, 6) for s in range(1, S + 1)]
    for (S, sparsity), seed, T in itertools.product(cases, range(4), (2, 3)):
        task = LinearMap(S, sparsity, trajectory_length=T, task_seed=seed)
        per_state = []
        for state in range(1, T):
            entropy = same_state_entropy(task, state)
            assert all(h == pytest.approx(0, abs=1e-9) or h == pytest.approx(math.log(2)) for h in entropy)
            brute = torch.tensor([h < 1e-9 for h in entropy])
            assert torch.equal(task.shortcut_cells(state), brute), (sparsity, seed, state)
            per_state.append(sum(entropy) / S)
            some_shortcut |= bool(brute.any())
            some_without |= not bool(brute.any())
        assert task.shortcut_loss == pytest.approx(sum(per_state) / len(per_state))
    assert some_shortcut and some_without  # both kinds of case were checked


def test_shortcut_example_of_issue_11():
    """S=12, s=6, task seed 0: cell 3 is x1[1] ⊕ x1[2], and 2 of 12 cells are shortcuts."""
    task = LinearMap(12, 6)
    assert torch.equal((task.A[1] + task.A[2]) % 2, task.A[3])
    assert task.shortcut_cells().nonzero().flatten().tolist() == [3, 11]
    assert task.shortcut_loss == pytest.approx(10 / 12 * math.log(2))


def test_blank_outputs_hide_x1_from_the_model_but_not_from_the_loss():
    task = LinearMap(6, 3, blank_outputs=True)
    plain = LinearMap(6, 3)
    tokens = task.batch("train", 0)
    assert torch.equal(tokens, plain.batch("train", 0))  # the same data, only the inputs differ
    inputs = task.model_inputs(tokens)
    assert inputs.shape == (tokens.shape[0], task.seq_len)
    assert torch.equal(inputs[:, :6], tokens[:, :6])  # x0 is read as it is
    assert (inputs[:, 6:] == BLANK).all() and BLANK == 2  # every x1 input is the blank
    assert torch.equal(tokens[:, 1:][:, task.loss_mask], tokens[:, 6:])  # targets stay the true bits
    assert torch.equal(plain.model_inputs(tokens), tokens[:, :-1])
    assert task.vocab_size == 3 and plain.vocab_size == 2
    assert task.chance_loss == pytest.approx(math.log(2)) == plain.chance_loss
    assert not task.shortcut_cells().any() and task.shortcut_loss == pytest.approx(math.log(2))
    assert torch.equal(task.ground_truth_attention(), plain.ground_truth_attention())


def test_blank_outputs_need_two_states():
    with pytest.raises(ValueError, match=r"trajectory_length must be 2 with blank_outputs.*got trajectory_length=3"):
        LinearMap(6, 3, trajectory_length=3, blank_outputs=True)


def test_patterns_and_reachable_statistics():
    task = LinearMap(6, 3)
    assert list(task.ground_truth_patterns()) == ["predict"]
    assert torch.equal(task.pattern("predict"), task.ground_truth_attention())
    with pytest.raises(ValueError, match=r"unknown pattern 'own'.*valid names: predict"):
        task.pattern("own")
    assert task.max_accuracy == 1.0 and task.floor_loss == 0


def test_an_explicit_matrix_replaces_the_seeded_one_and_bad_ones_are_rejected():
    rows = [[1, 1, 0], [0, 1, 1], [1, 0, 1]]
    task = LinearMap(3, 2, matrix=rows)
    assert task.A.tolist() == rows
    tokens = task.batch("train", 0)
    assert torch.equal(tokens[:, 3:], (tokens[:, :3] @ torch.tensor(rows).T) % 2)
    for bad, match in [([[1, 1, 0]], "3 rows of 3"), ([[1, 1, 0], [0, 1, 1], [1, 2, 0]], "0 or 1"),
                       ([[1, 1, 1], [0, 1, 1], [1, 0, 1]], "sparsity=2")]:
        with pytest.raises(ValueError, match=match):
            LinearMap(3, 2, matrix=bad)
