import pytest
import torch

from emergence_bench.tasks.in_context_linear_map import InContextLinearMap


def test_batch_shape_and_determinism():
    task = InContextLinearMap(state_size=5, sparsity=2, trajectory_length=4, batch_size=8)
    tokens = task.batch("train", 0)
    assert tokens.shape == (8, 20) and tokens.dtype == torch.long and task.seq_len == 19
    assert set(tokens.unique().tolist()) <= {0, 1} and task.vocab_size == 2
    assert torch.equal(tokens, task.batch("train", 0)) and not torch.equal(tokens, task.batch("train", 1))
    assert not torch.equal(tokens, task.batch("eval", 0))


def test_each_trajectory_follows_its_own_map_and_the_maps_vary():
    S, s, T = 6, 2, 5
    task = InContextLinearMap(state_size=S, sparsity=s, trajectory_length=T, batch_size=32)
    g = torch.Generator().manual_seed(3)
    tokens, A = task.generate_with_maps(g, 32)
    assert A.shape == (32, S, S) and (A.sum(-1) == s).all() and set(A.unique().tolist()) == {0, 1}
    states = tokens.view(32, T, S).tolist()
    for b in range(32):
        for t in range(T - 1):  # cell by cell: the parity of the cells row i of A picks
            expected = [sum(states[b][t][j] for j in range(S) if A[b, i, j]) % 2 for i in range(S)]
            assert states[b][t + 1] == expected
    assert len({tuple(a.flatten().tolist()) for a in A}) == 32  # a fresh map per sequence
    # The map comes from the batch's generator: the same generator state gives the same maps.
    assert torch.equal(task.generate_with_maps(torch.Generator().manual_seed(3), 32)[1], A)
    assert torch.equal(task.generate(torch.Generator().manual_seed(3), 32), tokens)


def test_ground_truth_per_sequence_matches_brute_force_with_next_token_shift():
    """Flip one cell of state t and recompute state t+1 with the sequence's own A: a row that predicts
    a token of state t+1 marks that cell exactly when the flip changes the token."""
    S, T, B = 5, 4, 6
    task = InContextLinearMap(state_size=S, sparsity=2, trajectory_length=T, batch_size=B)
    g = torch.Generator().manual_seed(0)
    tokens, A = task.generate_with_maps(g, B)
    truth = task.attention_from_maps(A)
    L = task.seq_len
    assert truth.shape == (B, L, L)
    states = tokens.view(B, T, S)
    for b in range(B):
        expected = torch.zeros(L, L, dtype=torch.long)
        for t in range(T - 1):
            following = (A[b] @ states[b, t]) % 2
            for cell in range(S):
                flipped = states[b, t].clone()
                flipped[cell] ^= 1
                changed = ((A[b] @ flipped) % 2) != following  # [S]
                for i in range(S):
                    token = (t + 1) * S + i
                    expected[token - 1, t * S + cell] = int(changed[i])  # row token-1 predicts it
        assert torch.equal(truth[b], expected), b
    assert (truth.sum(-1)[:, task.loss_mask] == 2).all() and truth[:, ~task.loss_mask].sum() == 0
    assert (truth.triu(1) == 0).all() and (truth <= task.ground_truth_attention()).all()


def test_the_envelope_is_the_previous_state_and_the_union_of_the_maps():
    task = InContextLinearMap(state_size=4, sparsity=1, trajectory_length=3, batch_size=64)
    truth = task.attention_from_maps(task.generate_with_maps(task.batch_generator("train", 7), 64)[1])
    # Every scored row: A's row marks one cell of the previous state, and over 64 maps all are used.
    envelope = task.ground_truth_attention()
    assert torch.equal(envelope.bool(), task.probe_keys())
    assert torch.equal(truth.amax(0), envelope)
    full = InContextLinearMap(state_size=4, sparsity=4, trajectory_length=3, batch_size=4)
    A = full.generate_with_maps(torch.Generator().manual_seed(0), 4)[1]
    assert (full.attention_from_maps(A) == full.ground_truth_attention()).all()


def test_mask_cells_and_losses():
    task = InContextLinearMap(state_size=3, sparsity=1, trajectory_length=3)
    assert task.loss_mask.tolist() == [False] * 2 + [True] * 6
    assert task.output_cell.tolist() == [-1, -1, 0, 1, 2, 0, 1, 2]
    assert task.chance_loss == pytest.approx(0.693147, abs=1e-5) and 0 < task.floor_loss < task.chance_loss



def test_bayes_oracle_against_enumeration_of_every_map_and_start():
    """S=3, s=1, T=3: p(next token | prefix) by brute force over all 27 maps × 8 starts, on every
    sequence they generate, equals the oracle's per-cell candidate count."""
    import itertools

    task = InContextLinearMap(3, 1, 3)
    S, T = 3, 3
    worlds = []
    for choice in itertools.product(range(S), repeat=S):
        A = torch.zeros(S, S, dtype=torch.long)
        A[torch.arange(S), torch.tensor(choice)] = 1
        for x0 in itertools.product((0, 1), repeat=S):
            states = [torch.tensor(x0)]
            for _ in range(T - 1):
                states.append((A @ states[-1]) % 2)
            worlds.append(torch.cat(states))
    worlds = torch.stack(worlds)  # [216, 9], each world equally likely
    p_true, p_max = task.bayes_oracle(worlds)
    for w in range(0, len(worlds), 7):
        for k, position in enumerate(range(S, S * T)):
            prefix = (worlds[:, :position] == worlds[w, :position]).all(dim=1)
            agree = prefix & (worlds[:, position] == worlds[w, position])
            assert float(p_true[w, k]) == pytest.approx(float(agree.sum() / prefix.sum())), (w, position)
    assert torch.all(p_max >= 0.5) and torch.all(p_max >= p_true - 1e-12)
    # The seeded estimate sits near the exact values over all worlds.
    exact_accuracy, exact_loss = float(p_max.mean()), float(-p_true.log().mean())
    assert task.max_accuracy == pytest.approx(exact_accuracy, abs=0.03)
    assert task.floor_loss == pytest.approx(exact_loss, abs=0.05)
