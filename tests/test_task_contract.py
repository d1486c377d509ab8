"""The Task contract (DESIGN.md, "Contracts → Task"; tasks/base.py), checked for every registered task:
built-ins and installed plugins."""

import math
import re

import pytest
import torch

from emergence_bench import registry
from emergence_bench.engine.run import run
from emergence_bench.tasks.base import SyntheticTask, TrainStream

# Small parameters per task so the contract runs fast; a task not listed is built with its defaults.
# A task with several forms is checked in each ("name:form" -> its name and parameters).
SMALL = {
    "linear_map": {"state_size": 5, "sparsity": 2, "trajectory_length": 3, "batch_size": 8},
    "linear_map:blank": {"state_size": 5, "sparsity": 2, "blank_outputs": True, "batch_size": 8},
    "cellular_automata": {"state_size": 5, "colors": 3, "rules": 8, "trajectory_length": 4, "batch_size": 8},
    "neural_ca": {"state_size": 5, "colors": 3, "hidden": 4, "rules": 8, "trajectory_length": 4,
                  "batch_size": 8},
    "dyck": {"bracket_types": 2, "max_depth": 3, "length": 16, "batch_size": 8},
    "mqar": {"vocab_size": 16, "pairs": 4, "queries": 3, "batch_size": 8},
    "mqar:key": {"vocab_size": 16, "pairs": 4, "queries": 3, "source": "key", "batch_size": 8},
    "in_context_linear_map": {"state_size": 4, "sparsity": 2, "trajectory_length": 4, "batch_size": 8},
}


def _test_only(name: str) -> bool:
    """A task registered by the test suite itself (conftest or a test module), not a real one."""
    module = registry.tasks.get(name).__module__.rsplit(".", 1)[-1]
    return module == "conftest" or module.startswith("test_")


TASKS = [name for name in registry.tasks.names() if not _test_only(name)]
TASKS += [form for form in SMALL if ":" in form and form.split(":")[0] in TASKS]

# Invalid parameters per built-in task, with the parameter the error must name.
INVALID = {
    "linear_map": [
        ({"state_size": 4, "sparsity": 5}, "sparsity"),  # s > S
        ({"state_size": 4, "sparsity": 0}, "sparsity"),
        ({"state_size": 0, "sparsity": 1}, "state_size"),  # S < 1
        ({"trajectory_length": 1}, "trajectory_length"),
        ({"trajectory_length": 3, "blank_outputs": True}, "trajectory_length"),
        ({"state_size": 3, "sparsity": 2, "matrix": [[1, 1, 0]]}, "matrix"),
        ({"state_size": 3, "sparsity": 2, "matrix": [[1, 1, 1], [0, 1, 1], [1, 0, 1]]}, "matrix"),
    ],
    "cellular_automata": [
        ({"colors": 1}, "colors"),
        ({"radius": -1}, "radius"),
        ({"state_size": 5, "radius": 3}, "radius"),  # window wider than the state
        ({"state_size": 4, "radius": 2}, "radius"),
        ({"rules": 0}, "rules"),
        ({"state_size": 0}, "state_size"),
        ({"trajectory_length": 1}, "trajectory_length"),
        ({"state_size": 4, "trajectory_length": 4, "tokens_per_batch": 15}, "tokens_per_batch"),
    ],
    "neural_ca": [
        ({"colors": 1}, "colors"),
        ({"radius": -1}, "radius"),
        ({"state_size": 4, "radius": 2}, "radius"),
        ({"hidden": 0}, "hidden"),
        ({"rules": 0}, "rules"),
        ({"state_size": 0}, "state_size"),
        ({"trajectory_length": 1}, "trajectory_length"),
        ({"state_size": 4, "trajectory_length": 4, "tokens_per_batch": 15}, "tokens_per_batch"),
    ],
    "dyck": [
        ({"bracket_types": 0}, "bracket_types"),
        ({"max_depth": 0}, "max_depth"),
        ({"length": 0}, "length"),
        ({"length": 7}, "length"),  # odd: no balanced string
        ({"open_prob": 0.0}, "open_prob"),
        ({"open_prob": 1.5}, "open_prob"),
    ],
    "mqar": [
        ({"vocab_size": 1}, "vocab_size"),
        ({"vocab_size": 2, "pairs": 1, "queries": 1}, "vocab_size"),  # one value: every answer given
        ({"vocab_size": 10, "pairs": 6}, "pairs"),  # more pairs than distinct keys
        ({"pairs": 0}, "pairs"),
        ({"pairs": 4, "queries": 5}, "queries"),
        ({"queries": 0}, "queries"),
        ({"source": "query"}, "source"),
    ],
    "in_context_linear_map": [
        ({"state_size": 4, "sparsity": 5}, "sparsity"),
        ({"sparsity": 0}, "sparsity"),
        ({"state_size": 0}, "state_size"),
        ({"trajectory_length": 2}, "trajectory_length"),  # one transition leaves nothing to predict
    ],
}
INVALID_CASES = [(name, kwargs, param) for name, cases in INVALID.items() if name in TASKS
                 for kwargs, param in cases]


def kwargs_of(form: str, **overrides) -> dict:
    return {**SMALL.get(form, {}), **overrides}


def build(form: str, **overrides) -> SyntheticTask:
    return registry.tasks.get(form.split(":")[0])(**kwargs_of(form, **overrides))


def accepts(form: str, parameter: str) -> bool:
    return parameter in registry.tasks.parameters(form.split(":")[0])


def assert_pattern(task: SyntheticTask, pattern: torch.Tensor, what: str) -> None:
    """[seq_len, seq_len] 0/1, causal (no key after its query row), non-zero only on scored rows."""
    L = task.seq_len
    assert pattern.shape == (L, L), what
    assert not pattern.is_floating_point() and set(pattern.unique().tolist()) <= {0, 1}, what
    assert (pattern.triu(1) == 0).all(), f"{what}: a row marks a key after itself"
    assert (pattern[~task.loss_mask] == 0).all(), f"{what}: an unscored row marks a key"


@pytest.fixture(scope="module")
def tasks() -> dict:
    """One instance per form, shared: the oracle statistics are computed once."""
    return {form: build(form) for form in TASKS}


@pytest.mark.parametrize("form", TASKS)
def test_shapes_mask_and_cells(form, tasks):
    task = tasks[form]
    assert isinstance(task, SyntheticTask)
    L, V = task.seq_len, task.vocab_size
    for split in ("train", "eval"):
        tokens = task.batch(split, 0)
        assert tokens.shape == (task.batch_size, L + 1) and tokens.dtype == torch.long
        assert tokens.min() >= 0 and tokens.max() < V
    kept = tokens.clone()
    inputs = task.model_inputs(tokens)
    assert torch.equal(tokens, kept), "model_inputs changed the tokens (the targets)"
    assert inputs.shape == (task.batch_size, L) and inputs.dtype == torch.long
    assert inputs.min() >= 0 and inputs.max() < V
    mask = task.loss_mask
    assert mask.shape == (L,) and mask.dtype == torch.bool and mask.any()
    cells = task.output_cell
    assert cells.shape == (L,) and cells.dtype == torch.long
    assert (cells[~mask] == -1).all() and (cells[mask] >= 0).all()
    # Every cell 0..num_cells-1 has a scored row: a per-cell mean never divides by zero.
    assert task.num_cells >= 1 and set(cells[mask].tolist()) == set(range(task.num_cells))


@pytest.mark.parametrize("form", TASKS)
def test_ground_truth_patterns(form, tasks):
    task = tasks[form]
    patterns = task.ground_truth_patterns()
    assert torch.equal(patterns["predict"], task.ground_truth_attention())
    for name, pattern in patterns.items():
        assert_pattern(task, pattern, name)
        assert torch.equal(task.pattern(name), pattern)
    assert patterns["predict"].any(), "no scored row has a source"
    with pytest.raises(ValueError, match="valid names"):
        task.pattern("no such pattern")
    # The probe measures a row's attention over probe_keys: visible keys that hold every true source.
    keys = task.probe_keys()
    assert keys.shape == (task.seq_len, task.seq_len) and keys.dtype == torch.bool
    assert not keys.triu(1).any()
    assert not (patterns["predict"].bool() & ~keys).any(), "a true source lies outside probe_keys"
    # What `attention_bias: {strength: c}` biases by default exists.
    assert set(task.bias_defaults["patterns"]) <= set(patterns)
    layers = task.bias_defaults["layers"]
    assert layers == "all" or all(isinstance(i, int) and i >= 0 for i in layers)


PER_SEQUENCE = [f for f in TASKS if hasattr(registry.tasks.get(f.split(":")[0]), "ground_truth_for")]


@pytest.mark.parametrize("form", PER_SEQUENCE)
def test_per_sequence_ground_truth_lies_inside_the_envelope(form, tasks):
    task = tasks[form]
    tokens = task.batch("eval", 0)
    truth = task.ground_truth_for(tokens)
    assert truth.shape == (task.batch_size, task.seq_len, task.seq_len)
    for b in range(task.batch_size):
        assert_pattern(task, truth[b], f"sequence {b}")
    assert (truth <= task.ground_truth_attention()).all()
    assert truth.any()


@pytest.mark.parametrize("form", TASKS)
def test_streams_are_deterministic_and_distinct(form):
    a, b = build(form), build(form)
    for task in (a, b):
        task.configure_streams(data_seed=3, eval_batches=2)
    torch.manual_seed(0)  # the global generator (the model seed) plays no part
    first = a.batch("train", 5)
    torch.manual_seed(1)
    assert torch.equal(b.batch("train", 5), first)  # same (task seed, data seed, split, index)
    assert torch.equal(a.batch("eval", 1), b.batch("eval", 1))
    assert not torch.equal(a.batch("train", 6), first)  # another index
    assert not torch.equal(a.batch("eval", 5), first)  # train and eval streams differ
    # The train stream follows the data seed; the eval set does not (every seed scored alike).
    eval_set = a.batch("eval", 0)
    b.configure_streams(data_seed=4, eval_batches=2)
    assert not torch.equal(b.batch("train", 5), first)
    assert torch.equal(b.batch("eval", 0), eval_set)
    # The loaders: train starts at the resumed step, the eval set is eval_batches fixed batches.
    assert torch.equal(next(iter(a.train_dataloader())), a.batch("train", 0))
    assert torch.equal(next(iter(TrainStream(a, start=5))), first)
    assert [t.shape[0] for t in a.val_dataloader()] == [a.batch_size] * 2
    a.configure_streams(data_seed=3, eval_batches=3)  # drops the cached eval set
    loaded = list(a.val_dataloader())
    assert len(loaded) == 3 and all(torch.equal(t, a.batch("eval", i)) for i, t in enumerate(loaded))


def tensors_of(task: SyntheticTask) -> dict:
    return {k: v for k, v in vars(task).items() if isinstance(v, torch.Tensor)}


@pytest.mark.parametrize("form", TASKS)
def test_the_task_instance_comes_from_the_task_seed(form):
    if not accepts(form, "task_seed"):
        pytest.skip("no task_seed parameter")
    torch.manual_seed(0)
    a = build(form, task_seed=11)
    torch.manual_seed(1)  # another model seed
    b = build(form, task_seed=11)
    b.configure_streams(data_seed=5, eval_batches=1)  # another data seed
    assert tensors_of(a).keys() == tensors_of(b).keys()
    for key, value in tensors_of(a).items():
        assert torch.equal(value, tensors_of(b)[key]), key  # the matrix A, the rule pool...
    for name, pattern in a.ground_truth_patterns().items():
        assert torch.equal(pattern, b.pattern(name))
    assert (a.floor_loss, a.max_accuracy, a.shortcut_loss) == (b.floor_loss, b.max_accuracy, b.shortcut_loss)
    assert torch.equal(a.batch("eval", 0), b.batch("eval", 0))
    assert not torch.equal(build(form, task_seed=12).batch("eval", 0), a.batch("eval", 0))


@pytest.mark.parametrize("form", TASKS)
def test_building_a_task_leaves_the_global_rng_alone(form):
    # A run builds its task once, before it seeds (emergence_bench.engine.run.plan): the model's initial
    # weights must not depend on whether the task was built first.
    torch.manual_seed(0)
    before = torch.get_rng_state()
    build(form).configure_streams(data_seed=3, eval_batches=1)
    assert torch.equal(before, torch.get_rng_state())


def test_a_task_that_draws_from_the_global_rng_is_refused_before_it_trains(tiny_config):
    from emergence_bench.config import ConfigError
    from emergence_bench.engine.run import plan
    from emergence_bench.tasks.linear_map import LinearMap

    class Unseeded(LinearMap):
        def __init__(self, state_size: int = 4, batch_size: int = 8, task_seed: int = 0):
            super().__init__(state_size=state_size, sparsity=1, batch_size=batch_size, task_seed=task_seed)
            self.noise = torch.rand(3)  # the global RNG: another instance at every seed

    registry.register_task("test_unseeded")(Unseeded)
    try:
        with pytest.raises(ConfigError, match="task 'test_unseeded' draws from torch's global RNG"):
            plan(tiny_config(task={"name": "test_unseeded", "state_size": 4, "batch_size": 8}))
    finally:
        registry.tasks.remove("test_unseeded")


@pytest.mark.parametrize("form", TASKS)
def test_reachable_losses_are_ordered(form, tasks):
    task = tasks[form]
    chance, floor, accuracy = task.chance_loss, task.floor_loss, task.max_accuracy
    shortcut = task.shortcut_loss
    assert all(isinstance(x, float) and math.isfinite(x) for x in (chance, floor, accuracy))
    assert 0 <= floor < chance <= math.log(task.vocab_size) + 1e-6
    assert 0 < accuracy <= 1
    # Per token −log p(true) ≥ −log p(likeliest), and by Jensen over tokens floor ≥ −log(max_accuracy),
    # both 0 exactly when the targets are deterministic.
    assert floor >= -math.log(accuracy) - 1e-9
    assert (floor == 0) == (accuracy == 1)
    if shortcut is not None:
        assert math.isfinite(shortcut) and floor - 1e-6 <= shortcut <= chance + 1e-6


@pytest.mark.parametrize("form", TASKS)
def test_defaults_are_valid_and_batch_size_zero_is_rejected(form):
    if ":" not in form:
        assert isinstance(registry.tasks.get(form)(), SyntheticTask)
    if accepts(form, "batch_size"):
        with pytest.raises(ValueError, match=r"batch_size must be in \[1, inf\], got 0"):
            build(form, batch_size=0)


@pytest.mark.parametrize("name, kwargs, parameter", INVALID_CASES,
                         ids=[f"{n}-{p}-{i}" for i, (n, _, p) in enumerate(INVALID_CASES)])
def test_invalid_parameters_name_the_parameter_and_what_was_given(name, kwargs, parameter):
    with pytest.raises(ValueError) as error:
        registry.tasks.get(name)(**kwargs)
    message = str(error.value)
    assert re.search(rf"\b{parameter} must\b", message) and "got" in message, message


@pytest.mark.parametrize("form", TASKS)
def test_a_run_records_the_task_facts_and_a_cell_per_output_cell(form, tmp_path, tiny_config):
    """The task's facts reach the result row, and per-position columns have one entry per cell."""
    task = build(form)
    config = tiny_config(task={"name": form.split(":")[0], **SMALL.get(form, {})},
                         trainer={"max_steps": 4, "eval_every": 4, "eval_batches": 1})
    record = run(config, tmp_path)
    assert record["status"] == "ok", record["error"]
    facts = record["task_facts"]
    assert facts["chance_loss"] == pytest.approx(task.chance_loss)
    assert facts["floor_loss"] == pytest.approx(task.floor_loss)
    assert facts["max_accuracy"] == pytest.approx(task.max_accuracy)
    assert facts["shortcut_loss"] == pytest.approx(task.shortcut_loss)
    assert math.isfinite(record["metrics"]["final_eval_loss"])
    assert len(record["plateau"]["per_position"]) == task.num_cells
    assert len(record["emergence"]["per_position"]) == task.num_cells


def test_a_plugin_task_lacking_a_member_the_core_calls_is_refused_when_it_registers():
    """Everything the core calls on a task is in the contract: a plugin written against an older,
    shorter one (here without ``model_inputs`` and ``configure_streams``) is refused by name where it
    registers, not mid-run."""
    members = {name: getattr(SyntheticTask, name) for name in registry.protocol_members(registry.TaskContract)
               if hasattr(SyntheticTask, name) and name not in ("model_inputs", "configure_streams")}
    Partial = type("Partial", (), {"__annotations__": {"vocab_size": int, "seq_len": int}, **members})
    with pytest.raises(TypeError, match=r"lacks configure_streams, model_inputs$"):
        registry.register_task("test_partial")(Partial)
    assert "test_partial" not in registry.tasks.names()
    # With them it registers: every other member it has, its sizes as annotations __init__ sets.
    Whole = type("Whole", (Partial,), {"model_inputs": SyntheticTask.model_inputs,
                                       "configure_streams": SyntheticTask.configure_streams})
    registry.register_task("test_whole")(Whole)
    registry.tasks.remove("test_whole")
