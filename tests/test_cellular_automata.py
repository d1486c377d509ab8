import itertools

import pytest
import torch

from emergence_bench.tasks.cellular_automata import CellularAutomata


def oracle_step(state: list[int], table: torch.Tensor, colors: int, radius: int) -> list[int]:
    """One transition cell by cell: the window i-r..i+r (periodic) read as a base-C number, leftmost
    cell most significant, indexes the table."""
    S = len(state)
    out = []
    for i in range(S):
        index = 0
        for offset in range(-radius, radius + 1):
            index = index * colors + state[(i + offset) % S]
        out.append(int(table[index]))
    return out


def explaining_tables(task: CellularAutomata, sequence: torch.Tensor) -> list[int]:
    """The pool tables under which every transition of ``sequence`` [S·T] holds."""
    states = sequence.view(task.trajectory_length, task.state_size).tolist()
    return [
        k for k, table in enumerate(task.tables)
        if all(oracle_step(states[t], table, task.colors, task.radius) == states[t + 1]
               for t in range(task.trajectory_length - 1))
    ]


def test_batch_shape_dtype_and_values():
    task = CellularAutomata(state_size=6, colors=3, trajectory_length=5, batch_size=7)
    tokens = task.batch("train", 0)
    assert tokens.shape == (7, 30) and tokens.dtype == torch.long and task.seq_len == 29
    assert tokens.min() >= 0 and tokens.max() < 3 and task.vocab_size == 3
    assert torch.equal(tokens, task.batch("train", 0))
    assert not torch.equal(tokens, task.batch("train", 1))
    assert CellularAutomata().batch("train", 0).shape == (64, 256)


def test_step_matches_a_cell_by_cell_loop():
    task = CellularAutomata(state_size=7, colors=3, radius=2, rules=4)
    g = torch.Generator().manual_seed(0)
    state = torch.randint(0, 3, (5, 7), generator=g)
    tables = task.tables[torch.randint(0, 4, (5,), generator=g)]
    expected = [oracle_step(s, t, 3, 2) for s, t in zip(state.tolist(), tables)]
    assert task.step(state, tables).tolist() == expected


def test_every_sequence_follows_one_table_from_the_pool_and_the_tables_vary():
    task = CellularAutomata(state_size=5, colors=3, radius=1, rules=8, trajectory_length=12, batch_size=32)
    used = []
    for sequence in task.batch("train", 0):
        found = explaining_tables(task, sequence)
        assert len(found) >= 1
        used.append(found[0])
    assert len(set(used)) >= 4  # 32 picks out of 8 rules: never all the same rule


def test_pool_depends_only_on_task_seed():
    a = CellularAutomata(colors=3, rules=16, task_seed=1)
    b = CellularAutomata(state_size=5, colors=3, rules=16, trajectory_length=4, task_seed=1, batch_size=16)
    c = CellularAutomata(colors=3, rules=16, task_seed=2)
    assert a.tables.shape == (16, 27) and a.tables.dtype == torch.long
    assert a.tables.min() >= 0 and a.tables.max() < 3
    assert torch.equal(a.tables, b.tables) and not torch.equal(a.tables, c.tables)
    assert len({tuple(t) for t in a.tables.tolist()}) == 16
    # Other data seeds and batches draw other sequences, all from the same pool.
    b.configure_streams(data_seed=7, eval_batches=1)
    assert torch.equal(a.tables, b.tables)
    for split, index in [("train", 0), ("train", 3), ("eval", 0)]:
        for sequence in b.batch(split, index):
            assert explaining_tables(b, sequence)


def test_source_cells_are_the_periodic_window():
    assert CellularAutomata(state_size=5, radius=1).source_cells().tolist() == [
        [1, 1, 0, 0, 1],
        [1, 1, 1, 0, 0],
        [0, 1, 1, 1, 0],
        [0, 0, 1, 1, 1],
        [1, 0, 0, 1, 1],
    ]
    assert torch.equal(CellularAutomata(state_size=4, radius=0).source_cells(), torch.eye(4, dtype=torch.long))
    assert (CellularAutomata(state_size=5, radius=2).source_cells() == 1).all()


@pytest.mark.parametrize("T", [2, 6])
def test_ground_truth_matches_brute_force_with_next_token_shift(T):
    """Change one cell of state t of real trajectories and recompute state t+1 with each sequence's
    own table: a row that predicts a token of state t+1 marks that cell exactly when some change of
    it changes the token."""
    S, C = 5, 3
    task = CellularAutomata(state_size=S, colors=C, radius=1, rules=16, trajectory_length=12, batch_size=24)
    tokens = task.batch("train", 0)
    # Recover each sequence's table from a long trajectory, then brute-force a task of length T.
    tables = []
    for sequence in tokens:
        found = explaining_tables(task, sequence)
        assert len(found) == 1  # 55 transitions pin down one of 16 random 27-entry tables
        tables.append(task.tables[found[0]])
    tables = torch.stack(tables)
    short = CellularAutomata(state_size=S, colors=C, radius=1, rules=16, trajectory_length=T, batch_size=24)
    L = short.seq_len
    states = tokens[:, : S * T].view(-1, T, S)
    ever_changed = torch.zeros(L + 1, L + 1, dtype=torch.bool)  # [source token, changed token]
    for t in range(T - 1):
        following = short.step(states[:, t], tables)
        assert torch.equal(following, states[:, t + 1])
        for cell in range(S):
            for shift in range(1, C):
                changed_state = states[:, t].clone()
                changed_state[:, cell] = (changed_state[:, cell] + shift) % C
                changed = short.step(changed_state, tables) != following  # [B, S]
                ever_changed[t * S + cell, (t + 1) * S : (t + 2) * S] |= changed.any(dim=0)
    # Row p predicts token p + 1.
    brute_force = ever_changed[:L, 1:].T.long()
    pattern = short.ground_truth_attention()
    assert pattern.shape == (L, L)
    assert torch.equal(pattern, brute_force)
    assert pattern[~short.loss_mask].sum() == 0
    assert (pattern.triu(1) == 0).all()
    assert (pattern.sum(dim=1)[short.loss_mask] == 3).all()


def test_tokens_per_batch_sets_the_number_of_sequences():
    task = CellularAutomata(state_size=4, trajectory_length=16, tokens_per_batch=1000)
    assert task.batch_size == 15  # 1000 // (4 · 16)
    assert task.batch("train", 0).shape == (15, 64)
    assert CellularAutomata(state_size=8, trajectory_length=16, tokens_per_batch=1000).batch_size == 7
    assert CellularAutomata(batch_size=5).batch_size == 5 and CellularAutomata().batch_size == 64


def test_next_token_shift_of_mask_and_cells():
    task = CellularAutomata(state_size=3, trajectory_length=3)
    assert task.loss_mask.tolist() == [False] * 2 + [True] * 6
    assert task.output_cell.tolist() == [-1, -1, 0, 1, 2, 0, 1, 2]
    assert task.chance_loss == pytest.approx(1.386294, abs=1e-5)


def test_radius_error_gives_the_range_for_the_state_size():
    with pytest.raises(ValueError, match=r"radius must be in \[0, 2\].*state_size=5"):
        CellularAutomata(state_size=5, radius=3)


def test_batch_size_and_tokens_per_batch_together_is_an_error():
    with pytest.raises(ValueError, match="batch_size or tokens_per_batch"):
        CellularAutomata(batch_size=8, tokens_per_batch=4096)


def influence_by_brute_force(task: CellularAutomata) -> torch.Tensor:
    """[S·T, S·T] bool, [source token, token]: some previous state and pool table, with one cell of
    the previous state changed to another colour, changes the token (a cell-by-cell loop)."""
    S, C, T = task.state_size, task.colors, task.trajectory_length
    within = torch.zeros(S, S, dtype=torch.bool)  # [cell of state t−1, cell of state t]
    for table in task.tables:
        for state in itertools.product(range(C), repeat=S):
            following = oracle_step(list(state), table, C, task.radius)
            for cell, shift in itertools.product(range(S), range(1, C)):
                changed = list(state)
                changed[cell] = (changed[cell] + shift) % C
                after = oracle_step(changed, table, C, task.radius)
                for i in range(S):
                    within[cell, i] |= after[i] != following[i]
    influence = torch.zeros(S * T, S * T, dtype=torch.bool)
    for t in range(1, T):
        influence[(t - 1) * S : t * S, t * S : (t + 1) * S] = within
    return influence


def test_named_patterns_match_brute_force():
    """``predict`` row p: the cells whose change can change token p + 1; ``own`` row p: the cells
    whose change can change token p itself. Cells outside never do."""
    task = CellularAutomata(state_size=5, colors=3, radius=1, rules=4, trajectory_length=3)
    L = task.seq_len
    influence = influence_by_brute_force(task)
    patterns = task.ground_truth_patterns()
    assert set(patterns) == {"predict", "own"}
    assert torch.equal(patterns["predict"], influence[:L, 1:].T.long())  # row p predicts token p + 1
    assert torch.equal(patterns["own"], influence[:L, :L].T.long())  # row p holds token p
    assert torch.equal(task.pattern("predict"), task.ground_truth_attention())
    assert torch.equal(task.pattern("own"), patterns["own"])


@pytest.mark.parametrize("S, r, T", [(5, 1, 3), (7, 2, 4), (4, 0, 2)])
def test_own_pattern_is_the_window_of_the_held_cell(S, r, T):
    task = CellularAutomata(state_size=S, colors=3, radius=r, rules=2, trajectory_length=T)
    expected = torch.zeros(task.seq_len, task.seq_len, dtype=torch.long)
    for p in range(task.seq_len):
        t, j = divmod(p, S)  # row p holds cell j of state t
        if t >= 1:
            for offset in range(-r, r + 1):
                expected[p, (t - 1) * S + (j + offset) % S] = 1
    own = task.pattern("own")
    assert torch.equal(own, expected)
    assert own[: S].sum() == 0 and (own.triu() == 0).all()  # state 0 marks nothing; keys before p


def test_unknown_pattern_lists_the_valid_names():
    with pytest.raises(ValueError, match=r"'nope'.*valid names: own, predict"):
        CellularAutomata(state_size=4).pattern("nope")


def test_floor_accuracy_and_shortcut_are_between_chance_and_perfect():
    task = CellularAutomata(state_size=4, rules=16, trajectory_length=4)
    assert 0 < task.floor_loss < task.shortcut_loss < task.chance_loss
    assert 0.25 < task.max_accuracy < 1
