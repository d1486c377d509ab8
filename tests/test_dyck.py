import itertools
import math

import pytest
import torch

from emergence_bench.tasks.base import seeded_generator
from emergence_bench.tasks.dyck import Dyck


def stack_match(sequence: list[int], k: int) -> tuple[bool, int, dict[int, int]]:
    """(balanced, deepest nesting, {closer position: opener position}) by a plain stack."""
    stack, deepest, matches = [], 0, {}
    for position, token in enumerate(sequence):
        if token < k:
            stack.append((token, position))
            deepest = max(deepest, len(stack))
        else:
            if not stack or stack[-1][0] != token - k:
                return False, deepest, matches
            matches[position] = stack.pop()[1]
    return not stack, deepest, matches


def all_sequences(length: int, max_depth: int, k: int):
    """Every balanced sequence of ``length`` tokens with nesting ≤ max_depth, with the probability the
    generator gives it (open_prob p), by enumerating every token string."""
    for sequence in itertools.product(range(2 * k), repeat=length):
        balanced, deepest, _ = stack_match(list(sequence), k)
        if balanced and deepest <= max_depth:
            yield list(sequence)


def generator_probability(sequence: list[int], task: Dyck) -> list[dict[int, float]]:
    """For each token, the generator's next-token distribution given the prefix (written out by hand
    from the scheme: open at depth 0, close at max depth or when just enough tokens remain)."""
    k, p, n = task.bracket_types, task.open_prob, len(sequence)
    stack, out = [], []
    for i, token in enumerate(sequence):
        depth, remaining = len(stack), n - i
        can_open = depth < task.max_depth and depth + 2 <= remaining
        can_close = depth > 0
        dist = {}
        if can_open:
            for t in range(k):
                dist[t] = (p if can_close else 1.0) / k
        if can_close:
            dist[k + stack[-1]] = (1 - p) if can_open else 1.0
        out.append(dist)
        if token < k:
            stack.append(token)
        else:
            stack.pop()
    return out


def test_batch_shape_vocabulary_and_determinism():
    task = Dyck(bracket_types=3, max_depth=4, length=20, batch_size=8)
    tokens = task.batch("train", 0)
    assert tokens.shape == (8, 20) and tokens.dtype == torch.long and task.seq_len == 19
    assert task.vocab_size == 6 and tokens.min() >= 0 and tokens.max() < 6
    assert torch.equal(tokens, task.batch("train", 0))
    assert not torch.equal(tokens, task.batch("train", 1))
    assert not torch.equal(tokens, task.batch("eval", 0))


def walk_with_torch_ops(task: Dyck, generator: torch.Generator, batch_size: int) -> torch.Tensor:
    """The generator as first written, with torch ops: the spec ``generate``'s numpy form must equal."""
    k, n = task.bracket_types, task.length
    coins = torch.rand(batch_size, n, generator=generator)
    types = torch.randint(0, k, (batch_size, n), generator=generator)
    depth = torch.zeros(batch_size, dtype=torch.long)
    stack = torch.zeros(batch_size, min(task.max_depth, n // 2) + 1, dtype=torch.long)
    rows = torch.arange(batch_size)
    tokens = torch.empty(batch_size, n, dtype=torch.long)
    for i in range(n):
        can_open = (depth < task.max_depth) & (depth + 2 <= n - i)
        opens = can_open & (~(depth > 0) | (coins[:, i] < task.open_prob))
        tokens[:, i] = torch.where(opens, types[:, i], k + stack[rows, (depth - 1).clamp_min(0)])
        slot = depth.clamp_max(stack.shape[1] - 1)
        stack[rows, slot] = torch.where(opens, types[:, i], stack[rows, slot])
        depth = depth + torch.where(opens, 1, -1)
    return tokens


@pytest.mark.parametrize("k,depth,length,open_prob",
                         [(2, 8, 32, 0.5), (4, 3, 64, 0.3), (1, 1, 10, 0.7), (3, 16, 16, 0.45)])
def test_generation_equals_the_torch_walk_token_for_token(k, depth, length, open_prob):
    task = Dyck(bracket_types=k, max_depth=depth, length=length, open_prob=open_prob)
    for index in range(5):
        ours = task.generate(seeded_generator("dyck-test", index), 33)
        theirs = walk_with_torch_ops(task, seeded_generator("dyck-test", index), 33)
        assert ours.dtype == torch.long and torch.equal(ours, theirs)


@pytest.mark.parametrize("k, depth, length", [(1, 1, 10), (2, 3, 30), (4, 8, 64), (3, 40, 24)])
def test_sequences_are_balanced_and_respect_max_depth(k, depth, length):
    task = Dyck(bracket_types=k, max_depth=depth, length=length, batch_size=64)
    tokens = task.batch("train", 3)
    for sequence in tokens.tolist():
        balanced, deepest, _ = stack_match(sequence, k)
        assert balanced, sequence
        assert deepest <= depth
    assert len({tuple(s) for s in tokens.tolist()}) > 1 or (k, depth) == (1, 1)


def test_every_bracket_type_and_depth_occurs():
    task = Dyck(bracket_types=3, max_depth=3, length=40, batch_size=64)
    tokens = task.batch("train", 0)
    assert set(tokens.unique().tolist()) == set(range(6))
    assert max(stack_match(s, 3)[1] for s in tokens.tolist()) == 3


def test_ground_truth_matches_a_stack_matcher_with_next_token_shift():
    task = Dyck(bracket_types=3, max_depth=5, length=32, batch_size=16)
    tokens = task.batch("train", 2)
    truth = task.ground_truth_for(tokens)
    assert truth.shape == (16, 31, 31)
    for b, sequence in enumerate(tokens.tolist()):
        _, _, matches = stack_match(sequence, 3)
        expected = torch.zeros(31, 31, dtype=torch.long)
        for closer, opener in matches.items():
            expected[closer - 1, opener] = 1  # row closer-1 predicts the closer
        assert torch.equal(truth[b], expected), b
    assert (truth.triu(1) == 0).all()  # causal: a row only marks keys it can see
    # Every row that predicts a closer marks exactly one key, every other row none.
    closers = tokens[:, 1:] >= 3
    assert torch.equal(truth.sum(-1), closers.long())
    # Each per-sequence pattern lies inside the envelope.
    assert (truth <= task.ground_truth_attention()).all()


@pytest.mark.parametrize("max_depth", [1, 2, 3])
def test_envelope_is_the_union_over_every_possible_sequence(max_depth):
    task = Dyck(bracket_types=1, max_depth=max_depth, length=10)
    union = torch.zeros(9, 9, dtype=torch.long)
    for sequence in all_sequences(10, max_depth, 1):
        _, _, matches = stack_match(sequence, 1)
        for closer, opener in matches.items():
            union[closer - 1, opener] = 1
    assert torch.equal(task.ground_truth_attention(), union)


def test_floor_loss_and_max_accuracy_by_enumeration():
    """Enumerate every sequence with its probability under the scheme: the expected entropy and top
    probability of each scored next token, averaged over rows."""
    task = Dyck(bracket_types=2, max_depth=2, length=8, open_prob=0.3)
    entropy = accuracy = total = 0.0
    for sequence in all_sequences(8, 2, 2):
        dists = generator_probability(sequence, task)
        prob = math.prod(d[t] for d, t in zip(dists, sequence))
        total += prob
        for d in dists[1:]:  # row p predicts token p + 1
            entropy += prob * -sum(q * math.log(q) for q in d.values()) / 7
            accuracy += prob * max(d.values()) / 7
    assert total == pytest.approx(1.0)
    assert task.floor_loss == pytest.approx(entropy)
    assert task.max_accuracy == pytest.approx(accuracy)
    assert 0 < task.floor_loss < task.chance_loss == pytest.approx(math.log(4))


def test_generator_frequencies_follow_the_scheme():
    """Sampled sequences occur about as often as the scheme's probability says."""
    task = Dyck(bracket_types=1, max_depth=2, length=6, open_prob=0.3, batch_size=4000)
    tokens = task.batch("train", 0)
    counts = {}
    for s in tokens.tolist():
        counts[tuple(s)] = counts.get(tuple(s), 0) + 1
    for sequence in all_sequences(6, 2, 1):
        expected = math.prod(d[t] for d, t in zip(generator_probability(sequence, task), sequence))
        assert counts.get(tuple(sequence), 0) / 4000 == pytest.approx(expected, abs=0.03)


def test_mask_and_cells():
    task = Dyck(length=64)
    assert task.loss_mask.all() and task.loss_mask.shape == (63,)
    assert task.output_cell.min() == 0 and task.num_cells == 16
    assert Dyck(length=6).output_cell.tolist() == [0, 1, 2, 3, 4]

