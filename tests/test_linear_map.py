import pytest
import torch

from tasks.linear_map import LinearMap


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


@pytest.mark.parametrize("kwargs, name", [
    ({"state_size": 4, "sparsity": 5}, "sparsity"),
    ({"state_size": 4, "sparsity": 0}, "sparsity"),
    ({"state_size": 0, "sparsity": 1}, "state_size"),
    ({"trajectory_length": 1}, "trajectory_length"),
    ({"batch_size": 0}, "batch_size"),
])
def test_invalid_parameters_name_the_parameter_and_range(kwargs, name):
    with pytest.raises(ValueError, match=rf"{name} must be in \["):
        LinearMap(**kwargs)
