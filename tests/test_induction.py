import math

import pytest
import torch

from emergence_bench import registry
from emergence_bench.engine.run import run
from emergence_bench.tasks.base import seeded_generator
from emergence_bench.tasks.induction import Induction


def brute_force_sources(sequence: list[int], length: int) -> dict[int, int]:
    """{row: key} read off one sequence: a scored row (a window token after the first) marks the
    position after its token's previous (only) occurrence, and that position holds the row's target."""
    sources = {}
    for row in range(length, len(sequence) - 1):
        previous = [q for q in range(row) if sequence[q] == sequence[row]]
        assert len(previous) == 1 and previous[0] < length  # once before, in the prefix
        key = previous[0] + 1
        assert sequence[key] == sequence[row + 1]  # the key holds the target
        sources[row] = key
    return sources


def starts(task: Induction, tokens: torch.Tensor) -> torch.Tensor:
    """[B] the prefix position r of each window's first token."""
    return (tokens[:, : task.length] == tokens[:, task.length : task.length + 1]).long().argmax(1)


def test_layout_a_window_of_the_distinct_prefix_from_a_random_start_and_the_registry_lists_it():
    assert "induction" in registry.tasks.names() and registry.tasks.get("induction") is Induction
    task = Induction(vocab_size=12, length=7, window=3, batch_size=256)
    tokens = task.batch("train", 0)
    assert task.seq_len == 9 and tokens.shape == (256, 10) and tokens.dtype == torch.long
    assert tokens.min() >= 0 and tokens.max() < 12
    prefix = tokens[:, :7]
    assert all(len(set(s)) == 7 for s in prefix.tolist())  # drawn without replacement
    assert len(prefix.unique()) == 12  # over the whole vocabulary
    r = starts(task, tokens)
    assert torch.equal(prefix[r[:, None] == torch.arange(7)], tokens[:, 7])  # token n occurs in the prefix
    assert torch.equal(tokens[:, 7:], prefix.gather(1, r[:, None] + torch.arange(3)))  # the window A[r : r + m]
    assert set(r.tolist()) == set(range(5))  # r uniform in [0, n − m], varying across the batch
    assert task.model_inputs(tokens).shape == (256, 9)
    defaults = Induction()
    assert (defaults.vocab_size, defaults.length, defaults.window, defaults.seq_len) == (64, 16, 8, 23)


def test_batches_are_determined_by_task_seed_split_and_index():
    task = Induction(vocab_size=20, length=5, window=3, batch_size=16, task_seed=3)
    first = task.batch("train", 2)
    torch.manual_seed(0)  # the global RNG plays no part
    again = Induction(vocab_size=20, length=5, window=3, batch_size=16, task_seed=3)
    assert torch.equal(again.batch("train", 2), first)
    expected = task.generate(seeded_generator(3, 0, "train", 2), 16)
    assert torch.equal(first, expected)
    assert not torch.equal(task.batch("train", 3), first)  # another index
    assert not torch.equal(task.batch("eval", 2), first)  # another split
    other = Induction(vocab_size=20, length=5, window=3, batch_size=16, task_seed=4)
    assert not torch.equal(other.batch("train", 2), first)


def test_the_mask_scores_exactly_the_window_after_its_first_token():
    task = Induction(vocab_size=10, length=6, window=4)
    # Tokens: a b c d e f | x y z w (a window of 4 from r); rows 6, 7, 8 (holding x, y, z) predict y, z, w.
    assert task.loss_mask.tolist() == [False] * 6 + [True] * 3
    assert task.output_cell.tolist() == [-1] * 6 + [0, 1, 2]
    assert task.probe_keys()[7].tolist() == [True] * 6 + [False] * 3
    assert not task.probe_keys()[:6].any()
    long = Induction(vocab_size=256, length=200, window=150)
    cells = long.output_cell[long.loss_mask]
    assert long.num_cells == 64 and cells.tolist() == sorted(cells.tolist()) and cells[0] == 0
    assert (long.output_cell[~long.loss_mask] == -1).all()


def test_ground_truth_is_the_previous_occurrence_by_brute_force_inside_the_envelope():
    n, m = 9, 4
    task = Induction(vocab_size=16, length=n, window=m, batch_size=64)
    L = task.seq_len
    tokens = task.batch("eval", 0)
    truth = task.ground_truth_for(tokens)
    assert truth.shape == (64, L, L) and truth.dtype == torch.long
    sequences = tokens.tolist() + [[100 + i for i in range(n)] + [100 + i for i in range(n - m, n)]]  # r = n − m
    truth = torch.cat([truth, task.ground_truth_for(torch.tensor(sequences[-1:]))])
    for sequence, pattern in zip(sequences, truth):
        expected = torch.zeros(L, L, dtype=torch.long)
        for row, key in brute_force_sources(sequence, n).items():
            expected[row, key] = 1
        assert torch.equal(pattern, expected)
    # The envelope: row n + j marks keys j + 1 .. j + 1 + (n − m), the union over the batch's r.
    envelope = task.ground_truth_attention()
    assert (envelope.triu(1) == 0).all() and torch.equal(envelope.sum(1).bool(), task.loss_mask)
    assert envelope[n + 1].tolist() == [0, 0] + [1] * (n - m + 1) + [0] * (L - n + m - 3)
    assert (truth <= envelope).all()
    assert torch.equal(truth.amax(0), envelope)  # every r in [0, n − m] occurs in 64 sequences


def test_the_shortcut_predictors_against_monte_carlo():
    task = Induction(vocab_size=20, length=10, window=4, batch_size=64)
    n, m, V = task.length, task.window, task.vocab_size
    assert task.chance_loss == pytest.approx(math.log(20)) and task.floor_loss == 0 and task.max_accuracy == 1
    tokens = torch.cat([task.batch("train", i) for i in range(32)])  # [2048, 14]
    hot = torch.nn.functional.one_hot(tokens, V)  # [B, n + m, V]
    losses = {"positional": [], "bag": [], "positional_bag": []}
    for j in range(m - 1):  # row n + j has seen A_r .. A_{r+j} of the window; target A_{r+j+1}
        target = tokens[:, n + j + 1 : n + j + 2]
        seen = hot[:, n : n + j + 1].sum(1)
        candidates = hot[:, j + 1 : j + 2 + n - m].sum(1)  # the positions the target may occupy
        sets = {"positional": candidates, "bag": hot[:, :n].sum(1) - seen,
                "positional_bag": (candidates - seen).clamp(min=0)}
        for name, weights in sets.items():
            assert weights.max() == 1  # a set of distinct tokens
            p = weights.gather(1, target).squeeze(1).double() / weights.sum(1)
            assert (p > 0).all()  # the set always holds the target
            losses[name].append(-p.log())
    monte_carlo = {name: float(torch.stack(values).mean()) for name, values in losses.items()}
    assert task.positional_loss == pytest.approx(math.log(7)) == pytest.approx(monte_carlo["positional"], abs=1e-9)
    assert task.bag_loss == pytest.approx(monte_carlo["bag"], abs=1e-9)  # every row's bag has n − j − 1 tokens
    assert task.positional_bag_loss == pytest.approx(monte_carlo["positional_bag"], abs=0.03)  # r random
    by_hand = [(math.log(7) + 6 * math.log(6)) / 7,  # j = 0: r ≥ 1 removes one candidate
               (math.log(7) + math.log(6) + 5 * math.log(5)) / 7,  # j = 1: r removes min(r, 2)
               (math.log(7) + math.log(6) + math.log(5) + 4 * math.log(4)) / 7]  # j = 2: min(r, 3)
    assert task.positional_bag_loss == pytest.approx(sum(by_hand) / 3, rel=1e-12)
    assert task.shortcut_loss == min(task.positional_loss, task.bag_loss, task.positional_bag_loss)
    for V, n, m in [(64, 16, 8), (64, 24, 8), (64, 32, 16), (8, 8, 7), (8, 8, 2)]:
        t = Induction(vocab_size=V, length=n, window=m)
        assert t.shortcut_loss == t.positional_bag_loss <= min(t.positional_loss, t.bag_loss)
        assert t.floor_loss < t.shortcut_loss < t.chance_loss
    defaults = Induction()
    assert defaults.positional_loss < defaults.bag_loss  # ln 9 = 2.20 < 2.47; positional_bag 1.79
    assert defaults.shortcut_loss == pytest.approx(1.7894, abs=1e-4)


@pytest.mark.parametrize("kwargs, parameter, valid", [
    ({"vocab_size": 15}, "vocab_size", r"\[16, inf\]"),  # the prefix is 16 distinct tokens
    ({"vocab_size": 4, "length": 5, "window": 2}, "vocab_size", r"\[5, inf\]"),
    ({"window": 1}, "window", r"\[2, 15\]"),
    ({"window": 16}, "window", r"\[2, 15\]"),  # the whole prefix from r = 0: a fixed offset
    ({"length": 2, "window": 2}, "length", r"\[3, inf\]"),
    ({"batch_size": 0}, "batch_size", r"\[1, inf\]"),
])
def test_invalid_parameters_name_the_parameter_and_the_range(kwargs, parameter, valid):
    with pytest.raises(ValueError, match=rf"^{parameter} must be in {valid}, got "):
        Induction(**kwargs)


def test_a_run_trains_end_to_end(tmp_path, tiny_config):
    task = {"name": "induction", "vocab_size": 8, "length": 6, "window": 4, "batch_size": 8}
    record = run(tiny_config(task=task, trainer={"max_steps": 4, "eval_every": 4, "eval_batches": 1}), tmp_path)
    assert record["status"] == "ok", record["error"]
    assert record["task_facts"]["shortcut_loss"] == pytest.approx(Induction(8, 6, 4).shortcut_loss)
    assert math.isfinite(record["metrics"]["final_eval_loss"])
    assert len(record["emergence"]["per_position"]) == 3  # one cell per scored row
