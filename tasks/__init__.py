"""Synthetic tasks: one LightningDataModule per module. Importing this package registers the built-ins."""

from emergence_bench.tasks import cellular_automata  # noqa: F401
from emergence_bench.tasks import linear_map  # noqa: F401
from emergence_bench.tasks import dyck, in_context_linear_map, mqar, neural_ca  # noqa: F401
