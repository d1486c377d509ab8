import math

import pytest
import torch

from emergence_bench.tasks.mqar import MQAR


def brute_force(sequence: list[int], pairs: int) -> tuple[list[int], dict[int, tuple[int, int]]]:
    """(the answers, {answer token position: (key position, value position)}) read off a sequence
    by scanning the context for each query key."""
    answers, sources = [], {}
    for position in range(2 * pairs, len(sequence), 2):
        matches = [m for m in range(pairs) if sequence[2 * m] == sequence[position]]
        assert len(matches) == 1  # every query key appears exactly once in the context
        m = matches[0]
        answers.append(sequence[2 * m + 1])
        sources[position + 1] = (2 * m, 2 * m + 1)
    return answers, sources


def test_layout_keys_values_and_determinism():
    task = MQAR(vocab_size=20, pairs=6, queries=4, batch_size=32)
    tokens = task.batch("train", 0)
    assert tokens.shape == (32, 20) and tokens.dtype == torch.long and task.seq_len == 19
    keys, values = tokens[:, 0::2], tokens[:, 1::2]  # context and query keys / values and answers
    assert keys.max() < 10 and values.min() >= 10 and values.max() < 20
    context_keys = keys[:, :6]
    assert all(len(set(row)) == 6 for row in context_keys.tolist())  # keys distinct in a sequence
    assert all(len(set(row)) == 4 for row in keys[:, 6:].tolist())  # each key asked at most once
    assert torch.equal(tokens, task.batch("train", 0)) and not torch.equal(tokens, task.batch("train", 1))
    assert not torch.equal(tokens, task.batch("eval", 0))


def test_answers_are_correct_by_brute_force():
    task = MQAR(vocab_size=16, pairs=5, queries=5, batch_size=64)
    tokens = task.batch("train", 4)
    for sequence in tokens.tolist():
        answers, _ = brute_force(sequence, 5)
        assert sequence[11::2] == answers
    # The queries really are shuffled and the values really vary.
    asked_first = {brute_force(s, 5)[1][11][0] for s in tokens.tolist()}
    assert len(asked_first) == 5
    assert len(tokens[:, 1:10:2].unique()) > 4


@pytest.mark.parametrize("source", ["value", "key"])
def test_ground_truth_positions_by_brute_force_with_next_token_shift(source):
    task = MQAR(vocab_size=24, pairs=7, queries=3, source=source, batch_size=16)
    tokens = task.batch("eval", 1)
    truth = task.ground_truth_for(tokens)
    L = task.seq_len
    assert truth.shape == (16, L, L)
    for b, sequence in enumerate(tokens.tolist()):
        _, sources = brute_force(sequence, 7)
        expected = torch.zeros(L, L, dtype=torch.long)
        for answer, (key, value) in sources.items():
            expected[answer - 1, value if source == "value" else key] = 1  # row answer-1 predicts it
        assert torch.equal(truth[b], expected), b
    # Rows with a source are exactly the scored rows; patterns are causal and inside the envelope.
    assert torch.equal(truth.sum(-1).bool(), task.loss_mask.expand(16, -1))
    assert (truth.triu(1) == 0).all() and (truth <= task.ground_truth_attention()).all()
    envelope = task.ground_truth_attention()
    assert torch.equal(envelope, truth.amax(0) | envelope)  # union of the batch is inside it
    assert (envelope.sum(-1)[task.loss_mask] == 7).all()


def test_mask_cells_and_losses():
    task = MQAR(vocab_size=10, pairs=3, queries=2)
    # Tokens: k v k v k v q a q a; rows 6 and 8 predict the answers.
    assert task.loss_mask.tolist() == [False] * 6 + [True, False, True]
    assert task.output_cell.tolist() == [-1] * 6 + [0, -1, 1]
    assert task.probe_keys()[6].tolist() == [True] * 6 + [False] * 3
    assert task.chance_loss == pytest.approx(math.log(5)) and task.floor_loss == 0
    many = MQAR(vocab_size=512, pairs=200, queries=130)
    assert many.num_cells == 64 and many.output_cell[many.loss_mask].tolist() == sorted(
        many.output_cell[many.loss_mask].tolist())

