"""The control patterns every task has (tasks/base.py, ``SyntheticTask.control_patterns``): ``placebo``
and ``near_miss``, biases shaped like ``predict`` that mark none of its keys."""

from types import SimpleNamespace

import pytest
import torch

from emergence_bench import registry
from emergence_bench.callbacks.attention_bias import AttentionBias
from emergence_bench.engine.model import SequenceModel
from emergence_bench.engine.run import run
from emergence_bench.tasks.base import SyntheticTask
from emergence_bench.tasks.cellular_automata import CellularAutomata
from emergence_bench.tasks.linear_map import LinearMap

CONTROLS = ("placebo", "near_miss")

# Every registered task with its defaults (not the ones the test suite registers), and small forms.
DEFAULTS = [name for name in registry.tasks.names()
            if registry.tasks.get(name).__module__.rsplit(".", 1)[-1] != "conftest"
            and not registry.tasks.get(name).__module__.rsplit(".", 1)[-1].startswith("test_")]
SMALL = {
    "linear_map:small": lambda seed: LinearMap(state_size=6, sparsity=2, trajectory_length=3, task_seed=seed),
    "linear_map:dense": lambda seed: LinearMap(state_size=5, sparsity=4, task_seed=seed),  # 1 free key a row
    "cellular_automata:small": lambda seed: CellularAutomata(state_size=8, colors=3, rules=4,
                                                             trajectory_length=3, task_seed=seed),
}
FORMS = DEFAULTS + list(SMALL)


def build(form: str, seed: int = 0) -> SyntheticTask:
    if form in SMALL:
        return SMALL[form](seed)
    return registry.tasks.get(form)(task_seed=seed)


@pytest.fixture(scope="module")
def tasks() -> dict:
    return {form: build(form) for form in FORMS}


@pytest.mark.parametrize("name", CONTROLS)
@pytest.mark.parametrize("form", FORMS)
def test_a_control_is_shaped_like_predict_and_marks_none_of_its_keys(form, name, tasks):
    task = tasks[form]
    predict, control, keys = task.pattern("predict"), task.pattern(name), task.probe_keys()
    L = task.seq_len
    assert control.shape == (L, L) and control.dtype == predict.dtype
    assert set(control.unique().tolist()) <= {0, 1}
    assert not control.triu(1).any(), "a key after its query row"
    assert not (control.bool() & ~keys).any(), "a key outside probe_keys"
    assert not (control.bool() & predict.bool()).any(), "a true source"
    free = (keys & ~predict.bool()).sum(1)
    # As many ones per row as predict, where the row has that many non-source keys; else all of them.
    assert torch.equal(control.sum(1), torch.minimum(predict.sum(1), free))
    assert not control[predict.sum(1) == 0].any()
    room = free >= predict.sum(1)
    assert torch.equal(control.any(1)[room], predict.any(1)[room])  # the same rows, where there is room


@pytest.mark.parametrize("form", FORMS)
def test_controls_are_fixed_by_the_task_seed_and_leave_the_global_rng_alone(form):
    torch.manual_seed(0)
    before = torch.get_rng_state()
    a = build(form, seed=3)
    first = {name: a.pattern(name) for name in CONTROLS}
    assert torch.equal(before, torch.get_rng_state())
    torch.manual_seed(1)  # another model seed plays no part
    b = build(form, seed=3)
    for name in CONTROLS:
        assert torch.equal(a.pattern(name), first[name])  # every call
        assert torch.equal(b.pattern(name), first[name])  # every construction


@pytest.mark.parametrize("form", ["linear_map", "cellular_automata", "linear_map:small", "cellular_automata:small"])
def test_the_placebo_follows_the_task_seed(form):
    assert not torch.equal(build(form, seed=0).pattern("placebo"), build(form, seed=1).pattern("placebo"))


def test_the_placebo_is_drawn_without_the_truth_of_the_same_seed():
    """Cellular automata: ``predict`` does not depend on the seed, the placebo does, and the near miss
    is a function of ``predict`` alone."""
    a, b = build("cellular_automata:small", 0), build("cellular_automata:small", 1)
    assert torch.equal(a.pattern("predict"), b.pattern("predict"))
    assert torch.equal(a.pattern("near_miss"), b.pattern("near_miss"))
    assert not torch.equal(a.pattern("placebo"), b.pattern("placebo"))


def cells(task: LinearMap | CellularAutomata, pattern: torch.Tensor) -> torch.Tensor:
    """[S, S]: the rows predicting state 1, on the keys of state 0."""
    S = task.state_size
    return pattern[S - 1 : 2 * S - 1, :S]


def test_near_miss_rule_on_a_given_matrix():
    """Each source in turn takes the nearest free key: +1, −1, +2, ... around the previous state."""
    A = [[1, 1, 0, 0, 0], [0, 0, 0, 1, 1], [1, 0, 0, 0, 1], [0, 1, 0, 1, 0], [1, 0, 1, 0, 0]]
    task = LinearMap(state_size=5, sparsity=2, matrix=A)
    expected = [[0, 0, 1, 0, 1],  # 0 -> 4 (1 is a source), 1 -> 2
                [1, 0, 1, 0, 0],  # 3 -> 2 (4 is a source), 4 -> 0 (wraps)
                [0, 1, 0, 1, 0],  # 0 -> 1, 4 -> 3 (0 is a source)
                [0, 0, 1, 0, 1],  # 1 -> 2, 3 -> 4
                [0, 1, 0, 1, 0]]  # 0 -> 1, 2 -> 3
    assert torch.equal(cells(task, task.pattern("near_miss")), torch.tensor(expected))


def test_near_miss_of_a_window_sits_just_outside_it():
    """Window i−1, i, i+1 -> i−2, i+2, i+3 (periodic), in every state."""
    task = CellularAutomata(state_size=8, colors=3, rules=2, trajectory_length=3)
    S = task.state_size
    expected = torch.zeros(S, S, dtype=torch.long)
    for i in range(S):
        expected[i, [(i - 2) % S, (i + 2) % S, (i + 3) % S]] = 1
    near_miss = task.pattern("near_miss")
    assert torch.equal(cells(task, near_miss), expected)
    assert torch.equal(near_miss[2 * S - 1 : 3 * S - 1, S : 2 * S], expected)


def test_without_free_keys_a_control_is_empty():
    task = LinearMap(state_size=4, sparsity=4)  # every row of A is all ones
    for name in CONTROLS:
        assert not task.pattern(name).any()


@pytest.mark.parametrize("task", [LinearMap(4, 2), CellularAutomata(state_size=4)], ids=["linear_map", "ca"])
def test_an_unknown_pattern_lists_the_controls(task):
    with pytest.raises(ValueError, match=r"unknown pattern 'nonsense'.*valid names: .*near_miss.*placebo"):
        task.pattern("nonsense")


@pytest.mark.parametrize("name", CONTROLS)
def test_attention_bias_sits_on_a_control(name):
    torch.manual_seed(0)
    task = LinearMap(4, 2)
    model = SequenceModel(2, task.seq_len, {"name": "transformer", "n_heads": 2, "head_dim": 4},
                          d_model=16, n_layers=1)
    callback = AttentionBias(task, strength=3.0, pattern=name)
    callback.setup(None, SimpleNamespace(model=model, device=torch.device("cpu")), "fit")
    assert torch.equal(callback._bias[0][0, 1], 3.0 * task.pattern(name).float())
    assert callback.report()["patterns"] == {"0": [name, name]}


@pytest.mark.parametrize("name", CONTROLS)
def test_a_run_trains_with_a_control_bias(name, tmp_path, tiny_config):
    record = run(tiny_config(callbacks={"attention_bias": {"strength": 5.0, "pattern": name}}), tmp_path)
    assert record["status"] == "ok"
    bias = record["attention_bias"]
    assert bias["applicable"] and bias["steps_applied"] > 0 and bias["patterns"] == {"0": [name, name]}
