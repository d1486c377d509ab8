"""Synthetic tasks: one LightningDataModule per module. Importing this package (or ``tasks.base``)
loads none of them: ``registry.tasks`` imports the modules ``BUILTINS`` names when a class is first
asked for, and each registers its task; their names and keys it reads from ``catalog.py`` alone."""

BUILTINS = ("cellular_automata", "linear_map", "dyck", "in_context_linear_map", "mqar", "neural_ca", "induction")
