"""The built-in tasks as the registry knows them before importing one (a task's module imports
Lightning): where each class is, and its config keys, a function with its constructor's signature.
A task-key mistake and `emergence-bench list` are answered from here, without Lightning.
tests/test_catalog.py checks every entry against its class: a new built-in task adds its own."""

from __future__ import annotations

from emergence_bench.registry import Declared


def cellular_automata(state_size: int = 16, colors: int = 4, radius: int = 1, rules: int = 256,
                      trajectory_length: int = 16, task_seed: int = 0, batch_size: int | None = None,
                      tokens_per_batch: int | None = None) -> None: ...


def dyck(bracket_types: int = 4, max_depth: int = 8, length: int = 64, open_prob: float = 0.5, task_seed: int = 0,
         batch_size: int = 64, score: str = "all") -> None: ...


def in_context_linear_map(state_size: int = 8, sparsity: int = 3, trajectory_length: int = 16, task_seed: int = 0,
                          batch_size: int = 128) -> None: ...


def induction(vocab_size: int = 64, length: int = 16, window: int = 8, task_seed: int = 0,
              batch_size: int = 64) -> None: ...


def linear_map(state_size: int = 8, sparsity: int = 3, trajectory_length: int = 2, task_seed: int = 0,
               batch_size: int = 128, blank_outputs: bool = False, matrix: list | None = None) -> None: ...


def mqar(vocab_size: int = 64, pairs: int = 8, queries: int = 8, source: str = "value", task_seed: int = 0,
         batch_size: int = 64) -> None: ...


def neural_ca(state_size: int = 16, colors: int = 4, radius: int = 1, hidden: int = 16, rules: int = 256,
              trajectory_length: int = 16, task_seed: int = 0, batch_size: int | None = None,
              tokens_per_batch: int | None = None) -> None: ...


CATALOG = {
    "cellular_automata": Declared("emergence_bench.tasks.cellular_automata.CellularAutomata", cellular_automata),
    "dyck": Declared("emergence_bench.tasks.dyck.Dyck", dyck),
    "in_context_linear_map": Declared("emergence_bench.tasks.in_context_linear_map.InContextLinearMap",
                                      in_context_linear_map),
    "induction": Declared("emergence_bench.tasks.induction.Induction", induction),
    "linear_map": Declared("emergence_bench.tasks.linear_map.LinearMap", linear_map),
    "mqar": Declared("emergence_bench.tasks.mqar.MQAR", mqar),
    "neural_ca": Declared("emergence_bench.tasks.neural_ca.NeuralCA", neural_ca),
}
