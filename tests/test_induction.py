import math

import pytest
import torch

from emergence_bench import registry
from emergence_bench.engine.run import run
from emergence_bench.tasks.base import seeded_generator
from emergence_bench.tasks.induction import Induction, distinct_count_distribution


def brute_force_sources(sequence: list[int], length: int) -> dict[int, int]:
    """{row: key} read off a sequence whose prefix has no repeated token: the row holding a second-copy
    token marks the position after that token's previous (only) occurrence, and that position holds
    the row's target."""
    sources = {}
    for row in range(length, len(sequence) - 1):
        previous = [q for q in range(row) if sequence[q] == sequence[row]]
        assert previous == [row - length]  # the token occurs once before, in the first copy
        key = previous[-1] + 1
        assert sequence[key] == sequence[row + 1]  # the key holds the target
        sources[row] = key
    return sources


def test_layout_the_second_half_copies_the_first_and_the_registry_lists_it():
    assert "induction" in registry.tasks.names() and registry.tasks.get("induction") is Induction
    task = Induction(vocab_size=12, length=7, batch_size=32)
    tokens = task.batch("train", 0)
    assert task.seq_len == 13 and tokens.shape == (32, 14) and tokens.dtype == torch.long
    assert tokens.min() >= 0 and tokens.max() < 12
    assert torch.equal(tokens[:, 7:], tokens[:, :7])
    assert len(tokens[:, :7].unique()) == 12  # the prefix is drawn over the whole vocabulary
    assert task.model_inputs(tokens).shape == (32, 13)


def test_batches_are_determined_by_task_seed_split_and_index():
    task = Induction(vocab_size=20, length=5, batch_size=16, task_seed=3)
    first = task.batch("train", 2)
    torch.manual_seed(0)  # the global RNG plays no part
    assert torch.equal(Induction(vocab_size=20, length=5, batch_size=16, task_seed=3).batch("train", 2), first)
    expected = task.generate(seeded_generator(3, 0, "train", 2), 16)
    assert torch.equal(first, expected)
    assert not torch.equal(task.batch("train", 3), first)  # another index
    assert not torch.equal(task.batch("eval", 2), first)  # another split
    assert not torch.equal(Induction(vocab_size=20, length=5, batch_size=16, task_seed=4).batch("train", 2), first)


def test_the_mask_scores_exactly_the_copy_after_its_first_token():
    task = Induction(vocab_size=10, length=4)
    # Tokens: a b c d a b c d; rows 4, 5, 6 (holding a, b, c of the copy) predict b, c, d.
    assert task.loss_mask.tolist() == [False] * 4 + [True] * 3
    assert task.output_cell.tolist() == [-1] * 4 + [0, 1, 2]
    assert task.probe_keys()[5].tolist() == [True] * 4 + [False] * 3
    assert not task.probe_keys()[:4].any()
    long = Induction(vocab_size=64, length=200)
    cells = long.output_cell[long.loss_mask]
    assert long.num_cells == 64 and cells.tolist() == sorted(cells.tolist()) and cells[0] == 0
    assert (long.output_cell[~long.loss_mask] == -1).all()


def test_ground_truth_is_the_previous_occurrence_by_brute_force():
    length = 9
    task = Induction(vocab_size=512, length=length, batch_size=64)
    truth = task.ground_truth_attention()
    L = task.seq_len
    assert truth.shape == (L, L) and (truth.triu(1) == 0).all()
    assert torch.equal(truth.sum(1).bool(), task.loss_mask)
    tokens = task.batch("eval", 0)
    distinct = [s for s in tokens.tolist() if len(set(s[:length])) == length]
    assert len(distinct) >= 32  # V ≫ n: most prefixes have no repeat
    # A constructed sequence too, with no repeat for certain.
    distinct.append(list(range(100, 100 + length)) * 2)
    for sequence in distinct:
        expected = torch.zeros(L, L, dtype=torch.long)
        for row, key in brute_force_sources(sequence, length).items():
            expected[row, key] = 1
        assert torch.equal(truth, expected)
    # With repeats in the prefix, the marked key still holds every target.
    small = Induction(vocab_size=3, length=8, batch_size=32)
    tokens = small.batch("train", 1)
    rows, keys = small.ground_truth_attention().nonzero().unbind(1)
    assert torch.equal(tokens[:, keys], tokens[:, rows + 1])


def test_facts_and_the_shortcut_against_monte_carlo():
    task = Induction(vocab_size=32, length=16)
    assert task.chance_loss == pytest.approx(math.log(32)) and task.floor_loss == 0 and task.max_accuracy == 1
    # The occupancy distribution sums to one and has the known mean V·(1 − (1 − 1/V)^n).
    p = distinct_count_distribution(32, 16)
    assert float(p.sum()) == pytest.approx(1.0, abs=1e-12)
    assert float((p * torch.arange(17)).sum()) == pytest.approx(32 * (1 - (1 - 1 / 32) ** 16), rel=1e-12)
    generator = torch.Generator().manual_seed(0)
    prefixes = torch.randint(0, 32, (20000, 16), generator=generator)
    distinct = (torch.nn.functional.one_hot(prefixes, 32).sum(1) > 0).sum(1).double()
    assert task.unigram_loss == pytest.approx(float(distinct.log().mean()), abs=0.005)
    # The in-context unigram's own loss on the scored rows of real batches: ln D at every row.
    tokens = torch.cat([task.batch("eval", i) for i in range(8)])
    targets = tokens[:, 1:][:, task.loss_mask]
    seen = torch.nn.functional.one_hot(tokens[:, :16], 32).sum(1) > 0  # [B, V]
    assert seen.gather(1, targets).all()  # every target is one of the prefix's tokens
    loss = seen.sum(1, keepdim=True).double().log().expand_as(targets).mean()
    assert task.unigram_loss == pytest.approx(float(loss), abs=0.03)
    assert task.floor_loss < task.shortcut_loss < task.unigram_loss < task.chance_loss
    # Tiny cases by hand: V=2, n=2 gives D=1 or 2 with equal probability; the bag predicts the last exactly.
    tiny = Induction(vocab_size=2, length=2)
    assert tiny.unigram_loss == pytest.approx(0.5 * math.log(2)) and tiny.shortcut_loss == pytest.approx(0.0)


def test_the_shortcut_the_bag_of_remaining_tokens_against_monte_carlo():
    task = Induction(vocab_size=8, length=10)
    tokens = torch.cat([task.batch("train", i) for i in range(40)])  # [2560, 20]
    n = task.length
    losses = []
    for k in range(1, n):  # row n − 1 + k has seen x_0 .. x_{k−1} of the copy; target x_k
        remaining = torch.nn.functional.one_hot(tokens[:, k:n], 8).sum(1)  # [B, V]
        count = remaining.gather(1, tokens[:, k : k + 1]).squeeze(1).double()
        losses.append(-(count / (n - k)).log())
    assert task.shortcut_loss == pytest.approx(float(torch.stack(losses).mean()), abs=0.02)


@pytest.mark.parametrize("kwargs, parameter, valid", [
    ({"vocab_size": 1}, "vocab_size", r"\[2, inf\]"),
    ({"vocab_size": 0}, "vocab_size", r"\[2, inf\]"),
    ({"length": 1}, "length", r"\[2, inf\]"),
    ({"batch_size": 0}, "batch_size", r"\[1, inf\]"),
])
def test_invalid_parameters_name_the_parameter_and_the_range(kwargs, parameter, valid):
    with pytest.raises(ValueError, match=rf"^{parameter} must be in {valid}, got "):
        Induction(**kwargs)


def test_a_run_trains_end_to_end(tmp_path, tiny_config):
    task = {"name": "induction", "vocab_size": 8, "length": 4, "batch_size": 8}
    record = run(tiny_config(task=task, trainer={"max_steps": 4, "eval_every": 4, "eval_batches": 1}), tmp_path)
    assert record["status"] == "ok", record["error"]
    assert record["task_facts"]["shortcut_loss"] == pytest.approx(Induction(8, 4).shortcut_loss)
    assert math.isfinite(record["metrics"]["final_eval_loss"])
    assert len(record["emergence"]["per_position"]) == 3  # one cell per scored row
